"""`python -m h3gates`: the user's commands, one module each in h3gates.commands (status, verify, replay,
check-config, candidates, doctor, keys, fc2). This module is their parser and dispatcher, nothing more.
The commands the workflow's rules and rungs run (rung, baseline, token, promote, plot, perf-worker,
profile-target) are h3gates.job, which h3gates/__main__.py reaches without importing this module: no
user command is in a job's code fingerprint (h3gates.core.fingerprints)."""

from __future__ import annotations

import argparse
import sys

from h3gates.commands import candidates, check_config, doctor, fc2, keys, replay, status, verify

COMMANDS = (status, verify, replay, check_config, candidates, doctor, keys, fc2)  # in --help's order

EXIT_CODES = """exit codes:
  0  done: the check passed, the record verified, the report was written (a failing gate still writes its report and exits 0)
  1  refused: a gate, a pass token, a promotion or a verification said no; the reasons and the fix are printed
  2  usage or configuration error, or a command that needs a GPU run without one; nothing was checked
  other: h3gates itself failed (a traceback says where)"""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("h3gates")
    except PackageNotFoundError:
        return "unknown (not installed)"


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors (an unknown option, a missing argument) are one line and exit 2, the usage
    left to --help (argparse prints the usage block, then the error); subcommands' parsers are of this class."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see: python -m {self.prog} --help)\n")


def parser() -> argparse.ArgumentParser:
    ap = OneLineParser(
        prog="h3gates",
        description="NVFP4 kernel validation ladder: status, verify and replay its gates.",
        epilog=EXIT_CODES + "\n\nThe workflow itself runs through snakemake (see README.md); the commands "
        "rung, baseline, token, promote, plot and profile-target are what its rules call.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--version", action="version", version=f"h3gates {_version()}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="{" + ",".join(m.NAME for m in COMMANDS) + "}")
    for m in COMMANDS:
        m.subparser(sub).set_defaults(command=m)
    return ap


def main(argv=None) -> int:
    from h3gates.core.errors import exit_status

    argv = sys.argv[1:] if argv is None else list(argv)
    a = parser().parse_args(argv)
    a.argv = argv[1:]  # the command's own arguments as given (the fc2 study records them in its reports)
    return exit_status(a.command.NAME, a.command.run, a)


if __name__ == "__main__":
    sys.exit(main())
