"""kafka_admin's delete_records: where each partition's log starts after a cut by offset or time."""

from __future__ import annotations

import pytest
from ansible_collections.pikit.cluster.plugins.modules import kafka_admin

cut_offsets = kafka_admin.cut_offsets
STARTS = {0: 0, 1: 40, 2: 0}
ENDS = {0: 100, 1: 100, 2: 10}


def test_a_cut_by_offset_never_passes_a_partitions_end_and_skips_those_already_past_it() -> None:
    assert cut_offsets(STARTS, ENDS, 50, None) == {0: 50, 1: 50, 2: 10}
    assert cut_offsets(STARTS, ENDS, 30, None) == {0: 30, 2: 10}, "partition 1 starts at 40 already"


def test_a_cut_by_time_starts_at_the_first_record_at_or_after_it_or_empties_an_older_partition() -> None:
    # offsets_for_times: partition 2 has no record at or after the time, so all of it is older.
    by_time = {0: 70, 1: 20, 2: None}
    assert cut_offsets(STARTS, ENDS, -1, by_time) == {0: 70, 2: 10}


def test_nothing_to_cut_is_no_change() -> None:
    assert cut_offsets({0: 5}, {0: 5}, 100, None) == {}


def test_the_action_needs_exactly_one_of_offset_and_time() -> None:
    both = kafka_admin.params_with_defaults(
        bootstrap_servers=["x:1"], topic="t", before_offset=1, before_time_ms=1
    )
    with pytest.raises(ValueError, match="one of before_offset and before_time_ms"):
        kafka_admin.delete_records(both, check=True)
    with pytest.raises(ValueError, match="one of before_offset and before_time_ms"):
        kafka_admin.delete_records(
            kafka_admin.params_with_defaults(bootstrap_servers=["x:1"], topic="t"), True
        )
