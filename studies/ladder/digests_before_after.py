"""The tiny model's 12-step video and audio latents and one block's output, SHA-256, from a tree given on
the command line: run it on the tree before a refactor (a `git worktree` of the old commit) and after,
and compare. CPU, about 40 s per run.

    python studies/ladder/digests_before_after.py TREE [auto|cuda]   # the reference semantics: comfy eager, or the CUDA model
"""

import sys
import time

sys.path.insert(0, sys.argv[1])
import torch  # noqa: E402

try:  # the tree after the structure change (empty package __init__ files, renamed modules: issue 29)
    from h3gates.core.model_profiles import load_profile  # noqa: E402
    from h3gates.model.h3 import build  # noqa: E402
    from h3gates.nvfp4.compare import sha256  # noqa: E402
except ImportError:  # the trees before it
    from h3gates import nvfp4  # noqa: E402
    from h3gates.model import build, load_profile  # noqa: E402

    sha256 = nvfp4.sha256

try:  # the tree before the layers (b14965d and earlier)
    from h3gates.reference import Reference  # noqa: E402
except ImportError:
    from h3gates.model.reference import Reference  # noqa: E402

torch.set_num_threads(2)
t = time.time()
sem = sys.argv[2] if len(sys.argv) > 2 else "auto"
m = build(load_profile("tiny"), seed=0, device="cpu", reference=Reference("cpu", sem))
v, a = m.trajectory(12, None)
x = m.block_forward(24, m.initial_hidden(0), 0)
print(
    sys.argv[1],
    sem,
    "video",
    sha256(v),
    "audio",
    sha256(a),
    "block24",
    sha256(x),
    f"{time.time() - t:.0f}s",
)
