"""server/protogen.py: the committed generated code is what proto/ generates."""

from timerwheel.server.protogen import stale_files


def test_generated_code_matches_the_proto():
    assert (
        stale_files() == []
    )  # else: python -m timerwheel.server.protogen, and commit what it wrote
