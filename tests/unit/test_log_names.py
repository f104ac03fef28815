"""LogReader refuses a table or column the log does not hold, listing the ones it does; a table of the schema the
run did not write (no DP: /privacy) reads as empty."""
from __future__ import annotations

import pytest

from fedmpi.store.h5log import LogReader, RunLog


def test_an_unknown_column_or_table_is_refused_listing_the_names(tmp_path):
    log = RunLog(tmp_path / "log.h5", config_yaml="{}", algorithm="pfm", run_name="x", parties=["a"],
                 val_sets=["cfp_fp"])
    log.append("eval", round=0, step=2, **{f"cfp_fp/{m}": 0.5 for m in ("accuracy", "accuracy_std", "tar_far_1e-3",
                                                                          "tar_far_1e-2")})
    log.close()
    with LogReader(tmp_path / "log.h5") as reader:
        table = reader.table("eval")
        assert table["round"].tolist() == [0] and table["cfp_fp/accuracy"].tolist() == [0.5]
        with pytest.raises(KeyError) as missing:
            table["lfw/accuracy"]
        assert str(missing.value) == (f"{tmp_path / 'log.h5'} /eval: no column 'lfw/accuracy' (columns: "
                                      f"cfp_fp/accuracy, cfp_fp/accuracy_std, cfp_fp/tar_far_1e-2, "
                                      f"cfp_fp/tar_far_1e-3, round, step)")
        with pytest.raises(KeyError, match=r"no table 'evals' \(tables: eval, rounds\)"):
            reader.table("evals")
        assert reader.table("privacy") == {}
