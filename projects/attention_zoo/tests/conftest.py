"""The library suite's seeding (every test and module fixture starts from seed 0)
for the project's tests too; the ``needs`` and ``slow`` markers apply as they are
hooks of the whole run."""
from tests.conftest import _deterministic  # noqa: F401
