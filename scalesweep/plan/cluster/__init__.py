"""What the head needs on a cluster before it submits anything: what the site demands of the jobs
(`site.py`: account, QoS limits, no network; the paths the jobs read), the lock a killed head left
(`head_lock.py`) and the SLURM jobs it left queued or running (`slurm_jobs.py`). Pure functions of
the config, the planned jobs and what SLURM or the folder says; the workflow's rules files call
them (workflow/rules/preview.smk, workflow/rules/restart.smk)."""
