"""The pairing of bench/in_model_profile.py: our calls against onnxruntime's nodes."""

from __future__ import annotations

from bench.in_model_profile import Call, pair, render


def _call(name: str, output: int, activation: int, parameters: int, seconds: float = 1e-4) -> Call:
    return Call(name, "op", output, activation, parameters, [seconds])


def test_a_call_pairs_with_the_node_of_its_output_and_the_nearest_inputs():
    ours = [_call("shortcut", 400, 1600, 4224), _call("grouped", 400, 1600, 18560),
            _call("transpose", 600, 600, 0)]
    theirs = [_call("grouped_node", 400, 1600, 18560), _call("shortcut_node", 400, 1600, 4352),
              _call("reorder", 48, 48, 0)]
    pairs, ours_alone, theirs_alone = pair(ours, theirs)
    assert [(c.name, n.name) for c, n in pairs] == [("shortcut", "shortcut_node"),
                                                    ("grouped", "grouped_node")]
    assert [c.name for c in ours_alone] == ["transpose"] and [n.name for n in theirs_alone] == ["reorder"]


def test_the_report_ranks_pairs_by_how_much_longer_ours_took():
    ours = [_call("a", 10, 10, 10, 3e-4), _call("b", 20, 20, 20, 1e-4)]
    theirs = [_call("na", 10, 10, 10, 1e-4), _call("nb", 20, 20, 20, 2e-4)]
    text = "\n".join(render("model", 1, ours, theirs, [4e-4], [3e-4]))
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows[0].startswith("| `a`") and "+200.0" in rows[0] and rows[1].startswith("| `b`")
    assert "Paired: ours 0.400 ms, onnxruntime 0.300 ms (1.33x)" in text


def test_unpaired_calls_of_one_kernel_are_listed_once_with_their_count_and_total():
    ours = [_call("step", 7, 7, 7, 2e-6), _call("head", 9, 9, 9, 5e-6), _call("step", 7, 7, 7, 3e-6)]
    text = "\n".join(render("model", 1, ours, [], [1e-5], [1e-5]))
    assert "Unpaired: ours `step` x2 5.0 us, `head` 5.0 us; onnxruntime none." in text
