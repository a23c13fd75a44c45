"""The contracts every method and both engines share, below everything else in fedad: the
detector (:mod:`.detector`), messages and their validation (:mod:`.messages`,
:mod:`.validate`), aggregation math (:mod:`.aggregate`), how a server talks to its clients
(:mod:`.grid`), the catalog of names (:mod:`.catalog`), errors (:mod:`.errors`), seeded
random streams (:mod:`.rng`), data containers (:mod:`.types`), values as written
(:mod:`.as_written`) and the collapse guard (:mod:`.collapse`). Nothing here imports
another fedad package (an import-linter contract says so)."""
