"""Chapter 5's new exercises (5.5, 5.6) beyond the registry-wide tests: other correct answers pass,
and the adversarial cases catch what they were built for."""

import torch

import attention_book as ab
from attention_book.exercises import check


def test_positions_added_with_unsqueeze_or_expand_pass_5_5(capsys):
    assert check("5.5", lambda e, table: e + table[: e.shape[1]].unsqueeze(0)), capsys.readouterr().out
    assert check("5.5", lambda e, table: e + table[None, : e.shape[1], :].expand_as(e)), capsys.readouterr().out


def test_adding_in_place_is_caught_by_5_5(capsys):
    def in_place(embeddings, table):
        embeddings += table[: embeddings.shape[1]]
        return embeddings

    assert not check("5.5", in_place)
    assert "changed the embeddings it was given (in place)" in capsys.readouterr().out


def test_learned_positions_as_an_embedding_pass_5_6(capsys):
    class WithEmbedding(torch.nn.Module):
        def __init__(self, max_len, d_model):
            super().__init__()
            self.max_len = max_len
            self.positions = torch.nn.Embedding(max_len, d_model)

        def forward(self, x):
            if x.shape[1] > self.max_len:
                raise ValueError(f"got {x.shape[1]} tokens, max_len is {self.max_len}")
            return x + self.positions(torch.arange(x.shape[1]))

    assert check("5.6", WithEmbedding), capsys.readouterr().out


def test_the_package_learned_encoding_passes_5_6(capsys):
    """ab.LearnedPositionalEncoding checks the length too, with a message naming both numbers."""
    assert check("5.6", lambda max_len, d_model: ab.LearnedPositionalEncoding(max_len, d_model)), (
        capsys.readouterr().out
    )
