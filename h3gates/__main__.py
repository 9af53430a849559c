"""`python -m h3gates`: a job of the workflow (h3gates.job: what its rules and rungs run) goes to the job
runner without importing the user's CLI, in the run's warm worker where it has one (h3gates.core.warm);
anything else to the CLI (h3gates.cli)."""

import sys

from h3gates import job

if sys.argv[1:2] == ["warm-worker"]:  # a run's warm worker (the Snakefile's onstart: h3gates.core.warm.start)
    from h3gates.core import warm

    # (it ends as a job in a process of its own does: the run's end waits for it, not for torch's teardown)
    warm.leave(
        warm.run_here(
            lambda: warm.serve(sys.argv[2], int(sys.argv[3]), job.main, job.preload, job.light, job.light_preload)
        )
    )

if sys.argv[1:2] and sys.argv[1] in job.JOBS:
    from h3gates.core import warm  # a job forks from the run's warm worker where there is one

    # a pass token or a promotion, and a rung job's restore, fork from the worker without its imports of torch (light);
    # a rung whose report the run cache keeps is restored so, or here where the worker takes no light job now
    code = warm.delegate(sys.argv, light_job=True) if warm.light(sys.argv) else None
    if code is None and warm.delegable(sys.argv):
        code = job.restored(sys.argv[1:])
    code = None if code == warm.NOT_RESTORED and sys.argv[1] == warm.RESTORE else code
    code = warm.delegate(sys.argv) if code is None else code
    if code is None and sys.argv[1] in warm.QUICK_EXIT:  # the job runs here: it ends as a forked one does
        warm.leave(warm.run_here(job.main))
    sys.exit(job.main() if code is None else code)

from h3gates.cli import main  # noqa: E402 (a job never imports the CLI)

sys.exit(main())
