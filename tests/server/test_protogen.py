"""server/protogen.py: the committed generated code is what proto/ generates."""

from timerwheel.server import protogen
from timerwheel.server.protogen import stale_files


def test_generated_code_matches_the_proto():
    assert (
        stale_files() == []
    )  # else: python -m timerwheel.server.protogen, and commit what it wrote


def test_the_check_reports_a_shipped_proto_out_of_step(tmp_path, monkeypatch):
    """The wheel ships timerwheel/v1/timerwheel.proto: a copy edited or left behind by a
    change to proto/ is stale like the generated code."""
    copy = tmp_path / "timerwheel.proto"
    copy.write_text(protogen.PROTO.read_text() + "// edited\n")
    monkeypatch.setattr(protogen, "SHIPPED_PROTO", copy)
    assert protogen.stale_files() == ["timerwheel.proto"]
