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


def test_the_paths_come_from_the_workflow_config_as_promotion_reads_them(tmp_path):
    """`keys` finds the key promotion signs with: attestation.key / trusted_keys of config/config.yaml in
    the current folder, with --configfile overlays merged over it; an argument wins over both."""
    ws = tmp_path / "ws"
    (ws / "config").mkdir(parents=True)
    ci_key, ci_trusted = tmp_path / "secrets" / "ci.key", tmp_path / "secrets" / "trusted.json"
    (ws / "config" / "config.yaml").write_text(
        f"profile: tiny\nattestation:\n  key: {ci_key}\n  trusted_keys: {ci_trusted}\n"
    )
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "home")}
    env.pop("H3GATES_KEY", None)
    env.pop("H3GATES_TRUSTED_KEYS", None)

    def keys(*args):
        return subprocess.run(
            [sys.executable, "-m", "h3gates", "keys", *args], cwd=ws, env=env, capture_output=True, text=True
        )

    p = keys("show")  # shows, creates nothing
    assert p.returncode == 0 and f"signing key: {ci_key} (none yet" in p.stdout and f"{ci_trusted} (none)" in p.stdout
    assert not ci_key.exists()
    assert keys("export", "--out", str(tmp_path / "ci.pub.json")).returncode == 0  # export creates it
    p = keys("show")
    assert p.returncode == 0 and f"signing key: {ci_key} (ci," in p.stdout and f"trusted keys: {ci_trusted}" in p.stdout
    assert ci_key.exists() and not (tmp_path / "home" / "h3gates").exists()  # nothing made in the user's config
    other = tmp_path / "other.key"
    (ws / "config" / "other.yaml").write_text(f"attestation:\n  key: {other}\n")
    p = keys("show", "--configfile", "config/other.yaml")
    assert (
        p.returncode == 0
        and f"signing key: {other} (none yet" in p.stdout
        and f"trusted keys: {ci_trusted}" in p.stdout
    )
    arg = tmp_path / "arg.key"
    p = keys("--key", str(arg), "show")
    assert p.returncode == 0 and f"signing key: {arg} (none yet" in p.stdout
    (ws / "config" / "bad.yaml").write_text("attestation: [\n")
    p = keys("show", "--configfile", "config/bad.yaml")
    assert p.returncode == 2 and "config file config/bad.yaml, line" in p.stderr, p.stderr
