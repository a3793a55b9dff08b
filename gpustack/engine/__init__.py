"""The one run engine: any command's plan, run the same way.

plan.py      CommandPlan and Stage (pure data), stage selection, the run's target nodes
options.py   RunFlags (every host-changing command's shared flags) -> RunOptions; LateVars
steps.py     what a Python step gets (StepContext) and returns (StageSummary); guards; RunResult
run.py       the stage loop: lock, run directory, host keys, stages in order, summary
stages.py    the stages that reach hosts: host-key gate, playbook runs, preflight
progress.py  stage lines, the preflight table, the summary table
records.py   run.json and the other files of a run directory
lock.py      one host-changing command per cluster at a time
"""
