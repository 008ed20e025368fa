"""Messages encoded by template (scaler/fastpath/templates.py) are byte for byte what the encoder writes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.protocol import Argument, Encoded, Task, TaskResult, encode, encode_many, make_template
from tests.protocol.strategies import DATA


def call(profiling: bool):
    def build(values):
        return Task(
            task_id=values[0],
            function_id=values[1],
            args=[Argument(data=data) for data in values[3:]],
            parent_task_id=values[2],
            profiling=profiling,
        )

    return build


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(DATA, min_size=3, max_size=6),
    profiling=st.booleans(),
    contents=st.randoms(use_true_random=False),
)
def test_a_template_encodes_any_content_of_its_shape_as_the_encoder_does(values, profiling, contents):
    build = call(profiling)
    template = make_template(build, [len(value) for value in values])
    assert template is not None, "a Task's layout depends on its fields' lengths only"
    other = [contents.randbytes(len(value)) for value in values]
    for sample in (values, other):
        assert template.encode(sample) == encode(build(sample))


def test_a_shape_whose_layout_depends_on_content_gets_no_template():
    def build(values):  # an argument only when the first byte is set: not a layout by lengths
        return Task(task_id=b"t" * 16, args=[Argument(data=values[0])] if values[0][0] else [])

    assert make_template(build, [4]) is None


def test_encoded_messages_travel_among_messages_as_they_are():
    task = Task(task_id=b"t" * 16, function_id=b"f" * 16, args=[Argument(data=b"x")])
    result = TaskResult(task_id=b"t" * 16, payload=b"r")
    frame = encode_many([task, Encoded(encode(result)), task])
    assert frame == encode(task) + encode(result) + encode(task)
    assert encode(Encoded(encode(result))) == encode(result)
