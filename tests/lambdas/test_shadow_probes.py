"""The shadow stage's probes as data (lambdas/canary_controller/probes.py): how many, their ids
within what botocore's sagemaker-runtime model accepts, and how capture lines are told apart."""

from __future__ import annotations

import re

import boto3
import pytest

from lambdas.canary_controller import capture, probes


@pytest.mark.parametrize(
    ("sample", "capture_percent", "n"),
    [(10, 100, 145), (100, 100, 1), (50, 100, 22), (10, 50, 200)],
)
def test_the_probe_count_is_the_least_that_keeps_a_false_failure_below_one_in_a_million(
    sample: int, capture_percent: int, n: int
) -> None:
    assert probes.probe_count(sample, capture_percent) == n
    if n < probes.MAX_PROBES_PER_KIND:
        # 4 x (1 - s c)^n, the bound the count is chosen by, at n and at one fewer
        found = sample / 100 * capture_percent / 100
        assert 4 * (1 - found) ** n <= probes.FALSE_FAILURE
        assert n == 1 or 4 * (1 - found) ** (n - 1) > probes.FALSE_FAILURE


def test_a_sample_too_small_for_the_cap_says_the_chance_it_leaves() -> None:
    n = probes.probe_count(1, 100)
    assert n == probes.MAX_PROBES_PER_KIND
    assert probes.false_failure_chance(1, 100, n) > 0.1  # said in the record, not hidden


def test_probe_ids_are_what_invoke_endpoint_takes_as_inference_id() -> None:
    shape = boto3.client("sagemaker-runtime", region_name="us-east-1").meta.service_model
    member = shape.operation_model("InvokeEndpoint").input_shape.members["InferenceId"]
    ids = probes.probe_ids("e" * 63, 1_800_000_000, probes.MAX_PROBES_PER_KIND)
    every = [i for kind in probes.KINDS for i in ids[kind]]
    assert len(set(every)) == len(every) == 2 * probes.MAX_PROBES_PER_KIND
    assert all(len(i) <= member.metadata["max"] and i.isprintable() for i in every)
    assert all(re.fullmatch(r"\S.*", i) for i in every)
    assert probes.probe_ids("e", 1, 1) != probes.probe_ids("e", 2, 1)  # one set per stage start


def test_a_probe_is_found_by_its_inference_id_or_its_body_and_never_compared() -> None:
    (whole,), (streamed,) = probes.probe_ids("ep", 1, 1).values()
    request = {"messages": [{"role": "user", "content": f"Reply OK. ({streamed})"}]}
    answer = {"choices": [{"message": {"content": "OK"}, "finish_reason": "length"}]}
    lines = [
        capture.capture_line({"messages": []}, answer, inference_id=whole),
        capture.capture_line(request, "data: {}\n\ndata: [DONE]\n\n"),  # no inferenceId
        capture.capture_line({"model": "jp_style", "messages": []}, answer),
    ]
    assert [capture.probe_id(line) for line in lines] == [whole, streamed, None]
    (kept,) = capture.parse_object("\n".join(lines), "k")
    assert kept.adapter == "jp_style"
