"""Study runner: one TOML file → data, models, analyses, JSON/CSV results, lme4 script and an
HTML report (``scoremix study STUDY.toml --out DIR``).  See ``docs/study-format.md``."""

from scoremix.study.config import StudyConfig, StudyConfigError, load_study, parse_study
from scoremix.study.data import StudyData, StudyDataError, load_study_data
from scoremix.study.parallel import DaskUnavailableError, Task, boot_chunks, chunk_seeds, run_tasks, task_seed
from scoremix.study.runner import StudyResult, run_study

__all__ = [
    "StudyConfig", "StudyConfigError", "load_study", "parse_study",
    "StudyData", "StudyDataError", "load_study_data",
    "Task", "run_tasks", "task_seed", "boot_chunks", "chunk_seeds", "DaskUnavailableError",
    "StudyResult", "run_study",
]
