"""`python -m h3gates`: a job of the workflow (h3gates.job: what its rules and rungs run) goes to the job
runner without importing the user's CLI, in the run's warm worker where it has one (h3gates.core.warm);
anything else to the CLI (h3gates.cli)."""

import sys

from h3gates import job

if sys.argv[1:2] == ["warm-worker"]:  # a run's warm worker (the Snakefile's onstart: h3gates.core.warm.start)
    from h3gates.core import warm

    sys.exit(warm.serve(sys.argv[2], int(sys.argv[3]), job.main, job.preload))

if sys.argv[1:2] and sys.argv[1] in job.JOBS:
    from h3gates.core import warm  # a rung or baseline job forks from the run's warm worker where there is one

    # (a rung whose report the run cache keeps is restored here first: a restore needs no worker)
    code = job.restored(sys.argv[1:]) if warm.delegable(sys.argv) else None
    code = warm.delegate(sys.argv) if code is None else code
    if code is None and sys.argv[1] in warm.QUICK_EXIT:  # the job runs here: it ends as a forked one does
        warm.leave(warm.run_here(job.main))
    sys.exit(job.main() if code is None else code)

from h3gates.cli import main  # noqa: E402 (a job never imports the CLI)

sys.exit(main())
