"""h3gates.model: the MiniMax-H3 stand-in (h3-model.md); its projections are roles (h3gates.model.roles)
candidates plug into. `h3` builds the model, `roles` and `reference` are the roles and the reference,
`checkpoint` loads and saves checkpoints. This package's __init__ imports nothing, so a module of it
carries only its own imports into a fingerprint."""
