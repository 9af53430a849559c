"""Every exception h3gates raises on purpose, in one leaf module (it imports nothing of the package),
so a low layer never imports a high one for an error type.

What each one means for a user:
- `ConfigError`: the configuration is refused before any job runs (exit 2).
- `GemmReferenceMismatch`: a job runs on a host that would choose another GEMM reference than the one
  its context was planned with (a ConfigError: the job refuses in one line, exit 2, before any work).
- `RegistryError`: a candidate declaration (kernels/<name>/candidate.py) is malformed or unknown.
- `ReportError`: a report, token or record is missing, not JSON, not schema-valid or edited.
- `Refusal`: a gate, pass token, promotion or verification said no; carries the reasons and the fix.
- `ArtifactError`: a shared baseline artifact is not the one the rung's context names.
- `NVFP4InputError`: an input outside a quantizer's or GEMM's domain (the message names the constraint).
- `AttestationError`: a promotion attestation is unsigned, signed by an untrusted key, or does not
  match the record it travels with.

`exit_status` turns them into a command's exit status, for the user's commands (h3gates.cli) and the
workflow's jobs (h3gates.job) alike.
"""

from __future__ import annotations

import os
import sys


class ConfigError(ValueError):
    pass


class GemmReferenceMismatch(ConfigError):
    """The GEMM reference this machine would use is not the one the run was planned with."""


class RegistryError(ValueError):
    pass


class ReportError(ValueError):
    pass


class Refusal(Exception):
    """What a command or job refuses: its `reasons`, the `fix` (the way on), and `cost`: what the refused run spent
    that a rerun cannot have back (rung 4's attempt after its first look: h3gates.rungs.r4_block), said in the
    refusal's header (exit_status), which the console's FAILED line keeps whole, ahead of the reasons it cuts."""

    def __init__(self, reasons, fix: str | None = None, cost: str | None = None):
        self.reasons = list(reasons)
        self.fix = fix
        self.cost = cost
        super().__init__("; ".join(self.reasons))


class ArtifactError(RuntimeError):
    """An artifact that is not the one its rung's context names (a ladder bug, never a candidate's). `path`: the
    file whose setting aside is the way on (the workflow makes it again), where there is one. A job that stops
    here moves it aside itself (h3gates.rungs.crash.guarded, through h3gates.core.heal.set_aside); a gate that
    reads it writes a failing report instead (h3gates.rungs.gate.Gate.untrusted): its reason is the `problem`
    alone, and it records `path`, which its pass token moves aside with that report (h3gates.core.tokens)."""

    def __init__(self, problem: str, path=None):
        self.problem, self.path = problem, None if path is None else str(path)
        super().__init__(problem)


# How a gate's failing report begins where the shared baseline artifact could not be trusted (an ArtifactError:
# h3gates.rungs.gate.Gate.untrusted), so the verdict table gives the artifact's way on, not the kernel's
UNTRUSTED = "the shared baseline artifact is not trusted here: "


class NVFP4InputError(ValueError):
    """An input outside a quantizer's domain; the message names the violated constraint."""


class AttestationError(ValueError):
    pass


class CheckpointError(ValueError):
    def __init__(self, path, problems: list[str]):
        self.problems = problems
        super().__init__(f"{path}: {len(problems)} problem(s):\n  " + "\n  ".join(problems))


class SpecError(ValueError):
    """An algorithm specification that cannot be used; the message names the problem."""


class NvmathMissing(RuntimeError):
    pass


class AlgoError(RuntimeError):
    """The named algorithm cannot run this problem (AlgoInit, a config attribute, or AlgoCheck refused it)."""


class NcuError(RuntimeError):
    """ncu is present but unusable here: it failed, timed out, or printed something we cannot read."""


class LeaseError(RuntimeError):
    pass


def exit_status(cmd: str, run, *args) -> int:
    """Run one `python -m h3gates` command (a user's, h3gates.cli, or a job's, h3gates.job) and turn what it
    raises on purpose into its exit status: a Refusal is 1, its reasons and fix on stderr; a ConfigError
    is 2, its one line on stderr; a reader that went away (`status | head -1`) ends it quietly with 1."""
    try:
        return run(*args)
    except Refusal as e:
        print(f"h3gates {cmd}: REFUSED" + (f" ({e.cost})" if e.cost else ""), file=sys.stderr)
        for reason in e.reasons:
            print(f"  - {reason}", file=sys.stderr)
        if e.fix:
            print(f"  fix: {e.fix}", file=sys.stderr)
        return 1
    except ConfigError as e:
        print(f"h3gates {cmd}: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away: stop quietly, as other commands do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the exit's flush cannot fail again
        return 1
