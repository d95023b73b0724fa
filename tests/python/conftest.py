# Makes the in-repo package importable without installing it.
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pytest_runtest_logreport(report):
    """With MLX_EP_FAILURE_LOG set (tools/gpu/pytest_split.sh), each failure's report is appended to
    that file as it happens: a process the split's time limit kills prints no summary, and the
    twenty-fourth session's GPU run lost the only account of a failure that way."""
    path = os.environ.get("MLX_EP_FAILURE_LOG")
    if path and report.failed:
        with open(path, "a") as f:
            f.write(f"== {report.nodeid} ({report.when})\n{report.longreprtext}\n")
