"""Which commit's fusedattn/ sources a run used: the bench records `fusedattn_source` (a digest of
the package's .py files, fusedattn.bench.common.source_digest) beside `fusedattn_commit`, which is
stale or "+dirty" where the run's copy of the tree was (the device's copies). This walks the
last N commits of the checkout and prints those whose fusedattn/*.py files give the digest.

    python scripts/source_commit.py DIGEST [N (200)]
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fusedattn.bench.common import source_digest_of  # noqa: E402


def git(*args, root):
    return subprocess.run(["git", "-C", root, *args], capture_output=True, check=True).stdout


def commit_digest(commit: str, root: str) -> str:
    names = git("ls-tree", "-r", "--name-only", commit, "--", "fusedattn", root=root)
    paths = [n for n in names.decode().splitlines() if n.endswith(".py")]
    return source_digest_of((p, git("show", f"{commit}:{p}", root=root)) for p in paths)


def main(argv):
    if len(argv) < 2:
        raise SystemExit(__doc__)
    want, n = argv[1], int(argv[2]) if len(argv) > 2 else 200
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    root = os.environ.get("SOURCE_COMMIT_ROOT", root)
    found = [c for c in git("rev-list", "-n", str(n), "HEAD", root=root).decode().split()
             if commit_digest(c, root) == want]
    for c in found:
        print(git("log", "-1", "--format=%h %cI %s", c, root=root).decode().strip())
    if not found:
        print(f"no commit among the last {n} has fusedattn/ sources with digest {want}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
