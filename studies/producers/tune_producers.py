"""Pick the rows-per-thread variant (QR = 2 or 4) of quantize_into and modulate_quantize on this GPU:
each variant is checked byte for byte against comfy-kitchen's CUDA quantize, then timed side by side
(CUDA graphs replayed in alternating rounds, medians) at MiniMax-H3's canonical 37,810 rows.

    python studies/producers/tune_producers.py --out studies/producers/evidence/<run>
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for the imports below (E402)
from h3gates.core.registry import load_implementation  # noqa: E402
from h3gates.model.roles import modulate  # noqa: E402
from h3gates.nvfp4 import oracle  # noqa: E402
from h3gates.nvfp4.cuda import producers as K  # noqa: E402
from h3gates.nvfp4.quantize import global_scale  # noqa: E402
from studies.producers.gpu_evidence import _segments, env, graphed, timed  # noqa: E402

M = load_implementation("modulate_fusion", "cuda")  # modulate_produce and its QROWS (kernels/modulate_fusion/cuda.py)
# each kernel's rows-per-thread variant is its launcher module's QROWS, read at every launch
QROWS_OF = {"quantize_into": K, "modulate_quantize": M}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="a new run folder, studies/producers/evidence/<run>/")
    a = ap.parse_args()
    rows, cols = 37810, 5376
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(rows, cols, device="cuda", generator=gen).to(torch.bfloat16)
    sc = (torch.randn(3, cols, device="cuda", generator=gen) * 0.3).to(torch.bfloat16)
    sh = (torch.randn(3, cols, device="cuda", generator=gen) * 0.3).to(torch.bfloat16)
    b = _segments(rows)
    g = global_scale(x).reshape(1).float()
    ref_q = oracle.comfy_quantize(x, g.reshape(()), backend="cuda")
    m = modulate(x, sh, sc, b)
    ref_m = oracle.comfy_quantize(m, global_scale(m), backend="cuda")
    q, s = K.buffers(rows, cols, "cuda")
    res, fns = {"equal_to_comfy": {}}, {}
    default = {k: mod.QROWS for k, mod in QROWS_OF.items()}

    def set_qrows(qrows):
        for k, mod in QROWS_OF.items():
            mod.QROWS = qrows[k]

    for kern, qr in [(k, r) for k in QROWS_OF for r in (2, 4)]:
        set_qrows({**default, kern: qr})
        if kern == "quantize_into":
            K.quantize_into(x, g, q, s)
            res["equal_to_comfy"][f"{kern}_qr{qr}"] = bool(torch.equal(q, ref_q[0]) and torch.equal(s, ref_q[1]))
            fn = graphed(lambda: K.quantize_into(x, g, q, s))
        else:
            _, mq, ms = M.modulate_produce(x, sh, sc, b)
            res["equal_to_comfy"][f"{kern}_qr{qr}"] = bool(torch.equal(mq, ref_m[0]) and torch.equal(ms, ref_m[1]))
            fn = graphed(lambda: M.modulate_produce(x, sh, sc, b))
        fns[f"{kern}_qr{qr}"] = fn
    set_qrows(default)
    res["timing_graph"] = timed(fns, rounds=30)
    print({k: round(v["median_ms"], 4) for k, v in res["timing_graph"].items()}, res["equal_to_comfy"])
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "script": "tune_producers",
        "environment": env(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": res,
    }
    (out / "tune.json").write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
