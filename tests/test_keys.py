"""`python -m h3gates keys`: show, export and trust, as a user moves a CI or cluster key's trust to the
machine where records are verified."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from workflow_util import ROOT


def _keys(tmp_path, who, *args):
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / who)}
    env.pop("H3GATES_KEY", None)
    env.pop("H3GATES_TRUSTED_KEYS", None)
    return subprocess.run(
        [sys.executable, "-m", "h3gates", "keys", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_show_export_trust(tmp_path):
    p = _keys(tmp_path, "ci", "show")
    assert p.returncode == 0 and "signing key:" in p.stdout and "trusted keys:" in p.stdout, p.stderr
    out = tmp_path / "ci.pub.json"
    assert _keys(tmp_path, "ci", "export", "--out", str(out)).returncode == 0
    entry = json.loads(out.read_text())
    shown = _keys(tmp_path, "laptop", "show").stdout
    assert entry["keyid"][:16] not in shown.split("trusted keys:")[1]  # another machine does not trust it yet
    p = _keys(tmp_path, "laptop", "trust", str(out), "--name", "ci-runner")
    assert p.returncode == 0 and "trusted ci-runner" in p.stdout
    assert "ci-runner" in _keys(tmp_path, "laptop", "show").stdout
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    p = _keys(tmp_path, "laptop", "trust", str(bad))
    assert p.returncode == 1 and p.stderr.startswith("h3gates keys:")
