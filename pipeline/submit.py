"""The script spark-submit runs: `spark-submit --master spark://HOST:7077 pipeline/submit.py
--records DIR --out DIR` (docs/analytics.md). It puts the checkout (or site-packages) holding
the `pipeline` package on the driver's path; the job uses only Spark's built-in functions, so
the executors need no copy of it.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.cli import main  # noqa: E402

sys.exit(main())
