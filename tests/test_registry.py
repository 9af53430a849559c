"""The candidate registry and the provenance derived from it: declarations, the config schema made
from them, per-candidate kernel fingerprints, the derived module lists, and the README's table."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from workflow_util import code_edit, cosmetic_edit

from h3gates.core import config as C
from h3gates.core import fingerprints as P
from h3gates.core import registry
from h3gates.core.context import RungContext

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = tuple(sorted(p.parent.name for p in (ROOT / "kernels").glob("*/candidate.py")))  # every candidate folder


def test_the_shipped_candidates_declare_themselves():
    found = registry.discover()
    assert tuple(found) == FOLDERS and {"modulate_fusion", "swiglu_fusion", "qkv_ring", "fc2_algo", "stream_a"} <= set(
        found
    )
    for c in found.values():
        for device in c.implementations:
            assert all((ROOT / f).is_file() for f in registry.sources(c.name, {"implementation": device}, "cpu"))


def test_the_readme_table_is_the_registry():
    """Every row the README's candidate table shows is the registry's row now (`python -m h3gates
    candidates --markdown` prints them), and every candidate from the seeds' design notes is shown; a
    candidate a user adds under kernels/ may be shown or not."""
    readme = (ROOT / "README.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line for line in registry.markdown_table().splitlines()[2:]}
    shown = [
        line for line in readme.splitlines() if line.startswith("| `") and "| `H3_" in line
    ]  # the candidate table's rows
    assert shown and all(line in rows.values() for line in shown), (
        "regenerate the table: python -m h3gates candidates --markdown"
    )
    from_seeds = {c.name for c in registry.discover().values() if c.seed[:3].isdigit()}
    assert {line.split("|")[1].strip(" `") for line in shown} >= from_seeds


def test_config_schema_comes_from_the_declarations():
    base = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    with pytest.raises(C.ConfigError, match="candidates.qkv_ring.params.ring_rows: 100 is not a multiple of 16"):
        C.validate_config(C.merge(base, {"candidates": {"qkv_ring": {"params": {"ring_rows": 100}}}}))
    with pytest.raises(C.ConfigError, match=re.escape(f"'no_such' was unexpected) (known: {', '.join(FOLDERS)})")):
        C.validate_config(C.merge(base, {"candidates": {"no_such": {}}}))
    with pytest.raises(C.ConfigError, match="baseline.accepted.0: 'no_such' is not one of"):
        C.validate_config(C.merge(base, {"baseline": {"accepted": ["no_such"]}}))
    assert C.cand_config(C.validate_config(base), "qkv_ring")["params"] == {"ring_rows": 64}
    assert C.cand_config(C.validate_config(base), "modulate_fusion")["params"] == {}


def _cfg(root: Path, device: str) -> dict:
    return C.validate_config(
        {**yaml.safe_load((root / "config/config.yaml").read_text()), "device": device}, root=str(root)
    )


def _fingerprints(root: Path, device: str) -> dict:
    cfg = C.validate_config(
        {**yaml.safe_load((root / "config/config.yaml").read_text()), "device": device}, root=str(root)
    )
    out = {}
    for cand in C.climbable(cfg, device)[0]:
        ctxs = [RungContext.from_config(cfg, cand, r) for r in range(1, 9)]
        out[cand] = [P.files_digest(P.kernel_files(c, str(root)) + P.code_files(c, str(root)), root) for c in ctxs]
    return out


@pytest.fixture
def tree(tmp_path):
    for name in ("h3gates", "kernels", "config"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    registry.discover.cache_clear()
    P.imported.cache_clear()
    yield tmp_path
    registry.discover.cache_clear()
    P.imported.cache_clear()


@pytest.mark.parametrize(
    "edit,changed",
    [
        ("kernels/modulate_fusion/modulate_fusion.cu", {"modulate_fusion"}),
        ("kernels/swiglu_fusion/cuda.py", {"swiglu_fusion"}),
        ("kernels/common/quantize.cu", {"qkv_ring"}),
        (
            "kernels/common/nvfp4.cuh",
            {"modulate_fusion", "swiglu_fusion", "qkv_ring"},
        ),  # fc2_algo is not enabled in config.yaml
        ("h3gates/nvfp4/cuda/producers.py", {"modulate_fusion", "swiglu_fusion", "qkv_ring"}),
        (
            "kernels/common/standin.cu",
            {"modulate_fusion", "swiglu_fusion", "qkv_ring"},
        ),  # the stand-in's kernels: every CUDA gate
    ],
)
def test_editing_one_cuda_source_reruns_only_the_candidates_using_it(tree, edit, changed):
    """The rules' fingerprint param (kernel files + the modules they and the rung import) per
    candidate on a GPU: an edit changes it exactly for the candidates that run the file."""
    before = _fingerprints(tree, "cuda")
    code_edit(tree / edit)
    after = _fingerprints(tree, "cuda")
    # the shipped candidates' expectations; a candidate added to kernels/ changes only if it runs the file
    runs = {c for c in before if edit in P.kernel_files(RungContext.from_config(_cfg(tree, "cuda"), c, 1), str(tree))}
    assert {c for c in before if before[c] != after[c]} == (changed & set(before)) | runs
    cpu_before = _fingerprints(tree, "cpu")
    assert cpu_before == _fingerprints(tree, "cpu")  # no CPU rung imports CUDA code


def test_comments_docstrings_and_layout_anywhere_change_no_fingerprint(tree):
    """Fingerprints follow behaviour (h3gates.core.sourcedigest): a comment, a docstring or a reformatting in
    any module of h3gates or any candidate's Python or CUDA file leaves every rung's fingerprint, on a CPU
    and on a GPU, as it was; so does a change to a user command (the CLI is in no job's fingerprint)."""
    before = {d: _fingerprints(tree, d) for d in ("cpu", "cuda")}
    files = sorted(tree.glob("h3gates/**/*.py")) + sorted(tree.glob("kernels/**/*.py"))
    files += sorted(p for p in tree.glob("kernels/**/*") if p.suffix in (".cu", ".cuh"))
    for f in files:
        cosmetic_edit(f)
    commands = [tree / "h3gates/cli.py", *sorted(tree.glob("h3gates/commands/*.py"))]
    for f in commands:  # a user command's code, not only its text
        code_edit(f)
    P.imported.cache_clear()
    assert {d: _fingerprints(tree, d) for d in ("cpu", "cuda")} == before


def test_one_token_in_the_shared_header_reruns_every_cuda_rung_compiling_it_and_no_cpu_rung(tree):
    """kernels/common/nvfp4.cuh: one number changed. Every rung (1-8) of a candidate whose CUDA build
    includes it gets a new fingerprint; no CPU rung does, and no CUDA rung of a candidate that does not
    compile it."""
    cpu, cuda = _fingerprints(tree, "cpu"), _fingerprints(tree, "cuda")
    header = tree / "kernels/common/nvfp4.cuh"
    text = header.read_text()
    assert "0x7fff7fffu" in text  # the abs-max mask of the amax reduction: one token
    header.write_text(text.replace("0x7fff7fffu", "0x7fff7ffeu", 1))
    compiles = {
        c
        for c in cuda
        if "kernels/common/nvfp4.cuh" in P.kernel_files(RungContext.from_config(_cfg(tree, "cuda"), c, 1), str(tree))
    }
    assert {"modulate_fusion", "swiglu_fusion", "qkv_ring"} <= compiles
    after = _fingerprints(tree, "cuda")
    for c in cuda:
        changed = [a != b for a, b in zip(cuda[c], after[c])]
        assert changed == [c in compiles] * 8, (c, changed)
    assert _fingerprints(tree, "cpu") == cpu


def test_module_lists_are_what_each_rung_imports():
    cfg = C.load_config([ROOT / "config/config.yaml"])
    files = {r: set(P.code_files(RungContext.from_config(cfg, "modulate_fusion", r))) for r in range(1, 9)}
    assert "h3gates/nvfp4/data/rcp_approx_sm90_delta.json" in files[1]
    assert "h3gates/core/perfgate.py" in files[4] and "h3gates/core/perfgate.py" not in files[1] | files[5]
    assert "h3gates/rungs/nsight.py" in files[8] and "h3gates/rungs/nsight.py" not in files[4]
    assert "h3gates/core/promotion.py" not in set().union(*files.values())  # bookkeeping edits rerun no gate
    # how a bad config is checked and refused (h3gates.core.config) is no rung's: what a rung reads of the
    # config is h3gates.core.candconfig's, so a refusal message's edit reruns no gate
    assert "h3gates/core/config.py" not in set().union(*files.values())
    assert all("h3gates/core/candconfig.py" in f for f in files.values())
    assert "h3gates/nvfp4/cuda/producers.py" not in set().union(*files.values())  # the CPU implementation
