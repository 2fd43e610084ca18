"""Recurrent models (torch, written here): a 2-layer LSTM language model, a bidirectional GRU tagger and
an Elman RNN (tanh) classifier with attention pooling.

Full size: hidden 512 / 256 / 256 at sequence 64 / 128 / 256.  CI size: hidden 32, sequence 16.
"""

from __future__ import annotations

from . import Built, Entry, export_torch, token_ids


def build_rnn(size: str, batch: int, arch: str) -> Built:
    import torch
    from torch import nn

    full = size == "full"
    vocab = 10000 if full else 500

    class LSTMLM(nn.Module):
        def __init__(self):
            super().__init__()
            h = 512 if full else 32
            self.emb, self.rnn, self.out = nn.Embedding(vocab, h), nn.LSTM(h, h, 2, batch_first=True), nn.Linear(h, vocab)

        def forward(self, ids):
            return self.out(self.rnn(self.emb(ids))[0])

    class GRUTagger(nn.Module):
        def __init__(self):
            super().__init__()
            h = 256 if full else 32
            self.emb = nn.Embedding(vocab, h)
            self.rnn = nn.GRU(h, h, 1, batch_first=True, bidirectional=True)
            self.out = nn.Linear(2 * h, 17)

        def forward(self, ids):
            return self.out(self.rnn(self.emb(ids))[0]).log_softmax(-1)

    class RNNClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            h = 256 if full else 32
            self.emb = nn.Embedding(vocab, 128 if full else 16)
            self.rnn = nn.RNN(128 if full else 16, h, 2, batch_first=True, nonlinearity="tanh")
            self.score = nn.Linear(h, 1)
            self.out = nn.Linear(h, 5)

        def forward(self, ids):
            states = self.rnn(self.emb(ids))[0]
            weights = self.score(states).softmax(1)
            return self.out((weights * states).sum(1))

    seq = {"lstm-lm": 64, "gru-tagger": 128, "rnn-classifier": 256}[arch] if full else 16
    torch.manual_seed(0)
    model = {"lstm-lm": LSTMLM, "gru-tagger": GRUTagger, "rnn-classifier": RNNClassifier}[arch]().eval()
    return export_torch(model, {"ids": token_ids(batch, seq, vocab)})


ENTRIES = [
    Entry("lstm-lm", "rnn", "2-layer LSTM language model, hidden 512, seq 64", build_rnn, params=(("arch", "lstm-lm"),)),
    Entry("lstm-lm-b8", "rnn", "LSTM LM, batch 8", build_rnn, batch=8, params=(("arch", "lstm-lm"),)),
    Entry("gru-tagger", "rnn", "bidirectional GRU tagger, hidden 256, seq 128", build_rnn,
          params=(("arch", "gru-tagger"),)),
    Entry("rnn-classifier", "rnn", "2-layer tanh RNN + attention pooling, seq 256", build_rnn,
          params=(("arch", "rnn-classifier"),)),
]
