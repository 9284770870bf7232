"""The README's example runs as pasted, against the test cluster."""

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_readme_example_runs(cluster):
    with open(os.path.join(HERE, "..", "README.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    env = dict(os.environ, RAFTLOCK_ENDPOINTS=",".join(cluster.endpoints),
               PYTHONPATH=os.path.dirname(HERE))
    r = subprocess.run([sys.executable, "-c", blocks[0]], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "writing under token" in r.stdout and "held by" not in r.stdout, r.stdout
