"""`python -m h3gates fc2 <mode>`: the FC2 cuBLASLt scheduling study (h3gates.fc2.commands, which says
what each mode does; it needs a GPU and nvmath-python)."""

from __future__ import annotations

NAME = "fc2"


def subparser(sub):
    from h3gates.fc2 import commands

    f = sub.add_parser(
        NAME,
        help="the FC2 cuBLASLt scheduling study (seed 003): characterize, sweep, selected, capture (needs a GPU)",
        description=commands.DESCRIPTION,
    )
    commands.arguments(f)
    return f


def run(a) -> int:
    from h3gates.fc2 import commands

    return commands.run(a, a.argv)
