"""studies/device/tree_aside.sh moves tracked files (the evidence folders) out of the tree for a device call
and back: a data-loss risk, so its round trip and its refusals are pinned here in a throwaway repository."""

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "studies/device/tree_aside.sh"

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or shutil.which("bash") is None, reason="needs git and bash"
)


def _sh(repo, *args, ok=True):
    r = subprocess.run(["bash", str(SCRIPT), *args], cwd=repo, capture_output=True, text=True)
    assert (r.returncode == 0) == ok, (r.returncode, r.stdout, r.stderr)
    return r


def _repo(tmp_path):
    repo = tmp_path / "repo"
    for rel in ("studies/a/evidence/run1/MANIFEST.json", "studies/b/evidence/x.json", "studies/a/tool.py"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(rel)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "x"], cwd=repo, check=True)
    return repo


def test_out_and_in_restore_every_tracked_file(tmp_path):
    """Catches: an evidence folder left behind in the hold, or a hold shared outside the clone."""
    repo = _repo(tmp_path)
    _sh(repo, "out")
    assert not (repo / "studies/a/evidence").exists() and not (repo / "studies/b/evidence").exists()
    assert (repo / "studies/a/tool.py").exists()  # only the evidence moves
    assert (repo / ".git/evidence-aside/a/evidence/run1/MANIFEST.json").exists()  # inside the clone's git dir
    _sh(repo, "out", ok=False)  # twice: refused, nothing moved again
    _sh(repo, "in")
    status = subprocess.run(["git", "status", "--short"], cwd=repo, capture_output=True, text=True).stdout
    assert status == "" and not (repo / ".git/evidence-aside").exists(), status


def test_a_folder_made_meanwhile_is_refused_and_the_hold_kept(tmp_path):
    """Catches: a folder made while the evidence was aside merged over (the held files lost) or the hold removed
    while tracked files are still missing."""
    repo = _repo(tmp_path)
    _sh(repo, "out")
    (repo / "studies/a/evidence/run1").mkdir(parents=True)
    (repo / "studies/a/evidence/run1/MANIFEST.json").write_text("new")
    r = _sh(repo, "in", ok=False)
    assert "was made while" in r.stderr
    assert (
        repo / ".git/evidence-aside/a/evidence/run1/MANIFEST.json"
    ).read_text() == "studies/a/evidence/run1/MANIFEST.json"
    shutil.rmtree(repo / "studies/a/evidence")
    _sh(repo, "in")
    assert (repo / "studies/a/evidence/run1/MANIFEST.json").read_text() == "studies/a/evidence/run1/MANIFEST.json"
    assert (repo / "studies/b/evidence/x.json").exists() and not (repo / ".git/evidence-aside").exists()
