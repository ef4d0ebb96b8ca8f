"""The device scripts (scripts/*.sh) are run by hand on the GPU machine, where a typo costs a
device call: each must parse (bash -n), and every project file one of them runs must exist."""

import glob
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = sorted(glob.glob(os.path.join(ROOT, "scripts", "*.sh")))


@pytest.mark.parametrize("path", SCRIPTS, ids=[os.path.basename(p) for p in SCRIPTS])
def test_device_script_parses_and_its_files_exist(path):
    res = subprocess.run(["bash", "-n", path], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    text = open(path).read()
    named = set(re.findall(r"\b((?:scripts|tests)/[\w./-]+\.(?:py|sh))\b", text))
    named |= {"scripts/" + m for m in re.findall(r"\$here/([\w.-]+\.(?:py|sh))", text)}
    missing = sorted(n for n in named if not os.path.exists(os.path.join(ROOT, n)))
    assert not missing, f"{os.path.basename(path)} runs files that do not exist: {missing}"
