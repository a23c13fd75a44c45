"""Write the worked example of docs/own-data.md: a hospital network's table, offline.

scikit-learn's Wisconsin breast-cancer table (569 tumours, 30 numeric features, shipped with
scikit-learn) becomes ``records.csv`` with three extra columns:

- ``site``: which of three hospitals holds the row. Non-IID by a documented rule: rows are
  ranked by ``mean texture`` and cut into thirds (north, centre, south); then 20% of the rows,
  drawn with seed 0, move to a random site. Each hospital sees a different texture range.
- ``scanner``: a text column (a categorical feature): each site's own mix of three vendors.
- ``diagnosis``: ``benign`` or ``malignant`` (the label; malignant tumours are the anomalies).

40 rows drawn with seed 0 are kept out of ``records.csv`` and written, without their
diagnosis, to ``new_rows.csv``: new patients to score with ``fedad score``.

    python examples/own-data/make_table.py [FOLDER]     # default: examples/own-data
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer

SITES = np.array(["north", "centre", "south"])
VENDORS = np.array(["ge", "philips", "siemens"])
VENDOR_MIX = {"north": [0.7, 0.2, 0.1], "centre": [0.2, 0.6, 0.2], "south": [0.1, 0.2, 0.7]}


def main(folder: Path) -> None:
    rng = np.random.default_rng(0)
    df = load_breast_cancer(as_frame=True).frame
    third = np.argsort(np.argsort(df["mean texture"].to_numpy())) * 3 // len(df)
    site = SITES[third]
    move = rng.random(len(df)) < 0.2
    site[move] = rng.choice(SITES, size=int(move.sum()))
    df["site"] = site
    df["scanner"] = [rng.choice(VENDORS, p=VENDOR_MIX[s]) for s in site]
    df["diagnosis"] = np.where(df.pop("target") == 0, "malignant", "benign")
    new = rng.choice(len(df), size=40, replace=False)
    keep = np.setdiff1d(np.arange(len(df)), new)
    folder.mkdir(parents=True, exist_ok=True)
    df.iloc[keep].to_csv(folder / "records.csv", index=False)
    df.iloc[np.sort(new)].drop(columns=["diagnosis"]).to_csv(folder / "new_rows.csv", index=False)
    print(f"wrote {folder / 'records.csv'} ({len(keep)} rows) and {folder / 'new_rows.csv'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
