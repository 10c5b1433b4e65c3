# scalesweep: scaling sweeps of deep-learning training.
# Each stage is one rules file, workflow/rules/<stage>.smk, holding rule <stage> and calling
# the package's stage function (docs/layout.md); config/config.yaml is the default local sweep.

# config/config.yaml, the default config, is read in workflow/rules/common.smk (strictly, so
# that a broken file is named with its line and column).


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/preview.smk"
include: "workflow/rules/restart.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/images.smk"
include: "workflow/rules/resources.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/tidy.smk"
include: "workflow/rules/probe.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/findings.smk"
include: "workflow/rules/max_batch.smk"
include: "workflow/rules/trace.smk"
include: "workflow/rules/history.smk"
include: "workflow/rules/compare.smk"
include: "workflow/rules/outcome.smk"


# Every rule is defined now: a history folder where one of them writes is refused before any job.
from scalesweep.plan import history_place

history_place.refuse_owned_history(
    config["history_dir"],
    workflow.rules,
    WORKDIR,
    config_files.sources(CONFIG_FILES, workflow.config_settings.config),
)


# Every run's result is a target itself: Snakemake does not rerun a missing intermediate file
# whose consumers are up to date, and a missing run must always be run again.
# The preview (and the site's refusals) first: nothing asks SLURM for a plan it would refuse
# (preview.smk). Then the earlier head's SLURM jobs are awaited (restart.smk), here rather than
# in the first training job's own inputs: Snakemake builds this job before any training job, whose
# inputs then see what those jobs finished.
# The traces `snakemake trace` made join only the report (trace.smk: reported_traces).
rule all:
    input:
        preview_of(max_batch=False),
        await_earlier_slurm_jobs,
        all_run_logs(),
        layout.tidy_table("epochs"),
        layout.tidy_table("runs"),
        [layout.table(table) for table in tables.TABLES],
        layout.FIGURES,
        layout.FINDINGS,
        layout.archived_marker(),
        layout.HISTORY_FIGURE,
        sides.comparison_outputs(config["compare_with"], layout.COMPARE),
        reported_traces,
