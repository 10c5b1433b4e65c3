"""Training logs -> parsed runs: finding the logs, detecting each one's format (formats/), the
parsed run and its checks, why an unfinished run ended, and SLURM's accounting of failed jobs.
Imports the contract and the plan."""
