"""`python -m h3gates check-config`: validate config overlays as the workflow would."""

from __future__ import annotations

from h3gates.commands.common import OVERLAYS, files_text

NAME = "check-config"


def subparser(sub):
    k = sub.add_parser(
        NAME, help="validate config overlays as the workflow would, naming the file and line of a YAML error"
    )
    k.add_argument("configfile", nargs="*", help=OVERLAYS)
    k.add_argument(
        "--configfile",
        dest="overlays",
        nargs="+",
        default=[],
        help="the same overlays, as the other commands take them",
    )
    return k


def run(a) -> int:
    from h3gates.core.config import climbable, configfiles, load_config
    from h3gates.core.verdicts import nothing_climbed

    files = configfiles([*a.configfile, *a.overlays])
    config = load_config(files)
    climb, left = climbable(config)
    print(f"config OK: {files_text(files)}: profile {config['profile']}, climbs {', '.join(climb) or 'no candidate'}")
    for why in left.values():
        print(f"  NOTE: {why}")
    if not climb:
        for why in nothing_climbed(config):
            print(f"  - {why}")
    return 0
