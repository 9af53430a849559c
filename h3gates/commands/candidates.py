"""`python -m h3gates candidates`: the registered candidates (kernels/<name>/candidate.py)."""

from __future__ import annotations

NAME = "candidates"


def subparser(sub):
    c = sub.add_parser(NAME, help="the registered candidates (kernels/<name>/candidate.py)")
    c.add_argument("--markdown", action="store_true", help="the README's table")
    return c


def run(a) -> int:
    from h3gates.core import registry

    if a.markdown:
        print(registry.markdown_table())
    else:
        for c in registry.discover().values():
            print(
                f"{c.name:18s} {c.flag:28s} roles {','.join(c.roles):12s} overrides {','.join(c.overrides):13s} {c.folder}"
            )
    return 0
