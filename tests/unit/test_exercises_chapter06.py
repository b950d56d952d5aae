"""Chapter 6's exercises beyond the registry-wide tests: the checkers refuse shortcuts and
accept other correct answers."""

import torch

import attention_book as ab
from attention_book.exercises import check, get


def test_calling_the_whole_decoder_layer_is_refused(capsys):
    assert not check("6.2", lambda layer, x, memory: layer(x, memory))
    assert "build the layer from its parts" in capsys.readouterr().out


def test_the_package_causal_mask_and_broadcasting_pass_exercise_6_1(capsys):
    def decoder_masks(source_padding, T_out):
        return ab.causal_mask(T_out), source_padding[:, None, :].repeat(1, T_out, 1)

    assert check("6.1", decoder_masks), capsys.readouterr().out


def test_a_one_token_at_a_time_leak_test_passes_exercise_6_3(capsys):
    def sees_the_future(model, tokens, vocab_size):
        original = model(tokens)
        for j in range(1, tokens.shape[1]):  # change token j alone; positions before j must not move
            changed = tokens.clone()
            changed[0, j] = (changed[0, j] + 3) % vocab_size
            if not torch.allclose(model(changed)[:, :j], original[:, :j], atol=1e-6):
                return True
        return False

    assert check("6.3", sees_the_future), capsys.readouterr().out


def test_a_tensor_answer_to_exercise_6_3_is_accepted_and_a_list_is_not(capsys):
    solution = get("6.3").solution
    assert check("6.3", lambda *args: torch.tensor(solution(*args)))
    capsys.readouterr()
    assert not check("6.3", lambda *args: [solution(*args)])
    assert "should return True or False" in capsys.readouterr().out


def test_the_package_feed_forward_passes_6_4(capsys):
    def with_functional(x, W1, b1, W2, b2):
        return torch.nn.functional.linear(torch.nn.functional.relu(torch.nn.functional.linear(x, W1.T, b1)), W2.T, b2)

    assert check("6.4", with_functional), capsys.readouterr().out


def test_the_package_greedy_decode_passes_6_5(capsys):
    assert check("6.5", lambda model, source, max_len, bos, eos: ab.greedy_decode(model, source, max_len, bos, eos)), (
        capsys.readouterr().out
    )


def test_teacher_forcing_through_forward_is_refused_by_6_5(capsys):
    def forced(model, source, max_len, bos, eos):
        return model(source, torch.full((source.shape[0], max_len), bos)).argmax(-1)

    assert not check("6.5", forced)
    assert "that is teacher forcing" in capsys.readouterr().out


def test_an_evaluation_loop_with_ab_evaluating_passes_6_6(capsys):
    def with_evaluating(model, batches):
        correct = total = 0
        with ab.evaluating(model), torch.no_grad():
            for inputs, labels in batches:
                correct += int((model(inputs).argmax(-1) == labels).sum())
                total += len(labels)
        return correct / total

    assert check("6.6", with_evaluating), capsys.readouterr().out


def test_the_first_position_and_leaks_into_position_0_are_in_6_3(capsys):
    from attention_book.exercises import chapter06

    assert not check("6.3", chapter06._loop_starts_at_one)
    assert "leak into position 0" in capsys.readouterr().out
