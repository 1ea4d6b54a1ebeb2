"""The merges of scatter-gather (server/scatter.py) on made-up node answers: List pages
merged by deliver time below the lowest continuation key, Topics summed and paged by
name, and the rule that the answers cover every partition exactly once."""

from __future__ import annotations

import grpc
import pytest

from timerwheel.server.scatter import Unanswered, _check_cover, _merge_list, _merge_topics
from timerwheel.store import keys
from timerwheel.v1 import timerwheel_pb2 as pb


def page(timers: list[tuple[int, str]], after: tuple[int, str] | None = None) -> pb.ListResponse:
    token = keys.encode_page_token(keys.wheel_key(*after)) if after else ""
    return pb.ListResponse(
        messages=[pb.TimerMessage(deliver_at_ms=t, message_id=i) for t, i in timers],
        next_page_token=token,
    )


def ids(response: pb.ListResponse) -> list[str]:
    return [m.message_id for m in response.messages]


def test_list_pages_merge_by_time_then_id_up_to_the_limit():
    merged = _merge_list([page([(1, "a"), (5, "e")]), page([(3, "c"), (5, "d")])], limit=3)
    assert ids(merged) == ["a", "c", "d"]
    assert keys.decode_page_token(merged.next_page_token) == keys.wheel_key(5, "d")


def test_a_node_whose_page_ended_early_bounds_the_merged_page():
    """Node B stopped at (4, "x") (its scan budget): nothing of B's beyond is known, so
    A's later timers wait for the next page, which starts after B's continuation key."""
    a = page([(1, "a"), (6, "f"), (7, "g")])
    b = page([(2, "b")], after=(4, "x"))
    merged = _merge_list([a, b], limit=10)
    assert ids(merged) == ["a", "b"]
    assert keys.decode_page_token(merged.next_page_token) == keys.wheel_key(4, "x")


def test_the_last_page_has_no_token():
    merged = _merge_list([page([(1, "a")]), page([])], limit=10)
    assert ids(merged) == ["a"] and merged.next_page_token == ""


def test_topics_are_summed_over_nodes_and_read_whole_across_rounds():
    """Node 0 answers in two rounds (it has more after "b"); node 1 in one. A topic on
    both is summed once per node, though node 1 is asked again in the second round."""
    rows = {
        0: [("a", 1, 0), ("b", 2, 1), ("c", 3, 0)],
        1: [("b", 10, 0), ("d", 4, 2)],
    }
    asked: list[str] = []

    def ask_all(request: pb.TopicsRequest) -> list[pb.TopicsResponse]:
        asked.append(request.page_token)
        answers = []
        for node, topics in rows.items():
            after = [row for row in topics if row[0] > request.page_token]
            cut = after[:2] if node == 0 else after
            answers.append(pb.TopicsResponse(
                topics=[pb.TopicBacklog(topic=t, pending=p, fired_unacked=u) for t, p, u in cut],
                next_page_token=cut[-1][0] if len(after) > len(cut) else "",
            ))  # fmt: skip
        return answers

    first = _merge_topics(ask_all, pb.TopicsRequest(limit=2))
    assert asked == ["", "b"]
    assert [(t.topic, t.pending, t.fired_unacked) for t in first.topics] == [
        ("a", 1, 0), ("b", 12, 1),
    ]  # fmt: skip
    assert first.total == 4 and first.next_page_token == "b"
    rest = _merge_topics(ask_all, pb.TopicsRequest(limit=2, page_token="b"))
    assert [t.topic for t in rest.topics] == ["c", "d"] and rest.next_page_token == ""


def test_answers_must_cover_every_partition_exactly_once():
    _check_cover([[0, 3], [1, 4], [2, 5]], 6)
    with pytest.raises(Unanswered) as missing:
        _check_cover([[0, 3], [1, 4]], 6)
    assert missing.value.code is grpc.StatusCode.UNAVAILABLE
    assert "[2, 5]" in missing.value.details
    with pytest.raises(Unanswered) as twice:
        _check_cover([[0, 3], [1, 3], [2, 4, 5]], 6)
    assert "[3]" in twice.value.details
