"""The FC2 sweep's arguments as the workflow runs it (rule fc2_sweep), in the core the workflow imports, and
apart from `h3gates.fc2.commands`: the rule's fingerprint covers what `commands.py` imports, and this module's
imports (the config and the profiles) are not the sweep's behaviour, so an edit to them must not rerun the sweep
on the GPU."""

from __future__ import annotations


def study_args(config: dict) -> str:
    """The sweep's shape (the profile's FC2: tokens x d_ff -> d_model) and options (fc2_algo's params), from a
    validated config: what rule fc2_sweep runs and what studies/perfgate/campaign.py runs where it is missing."""
    from h3gates.core import config as C
    from h3gates.core import model_profiles as M

    prof = M.load_profile(config["profile"], config.get("profiles"))
    n, k = prof.gemm_shapes()["fc2"]
    p = C.cand_config(config, "fc2_algo")["params"]
    return (
        f"--rows {prof.rows} --n {n} --k {k} --seed {config['seed']} --max-candidates {p['sweep_candidates']} "
        f"--max-explicit {p['sweep_explicit']} --rounds {p['sweep_rounds']}"
    )
