"""The run report: ``RUN/report/index.html`` (static, offline) with PNG plots, from the files of a run directory.

``data`` reads the run (stats, step folders), ``scan`` profiles the documents, ``plots`` draws, ``html`` renders,
``write`` puts them together (``python -m pipelines.report RUN``).
"""

from pipelines.report.write import add_evaluation, write_report

__all__ = ["add_evaluation", "write_report"]
