"""Speech models: convolutional front ends over long time axes, then a transformer or an LSTM.

Full size is what the models see in use: Whisper's encoder over its fixed 30 s window (80 mel bins x
3,000 frames, two Conv1d + GELU at 384 channels, 4 layers at tiny's widths), wav2vec2 over one second
of 16 kHz audio (seven Conv1d of 512 channels, group norm, then a transformer), and a DeepSpeech-style
Conv1d + bidirectional LSTM over 400 spectrogram frames.  CI size shortens the time axis and narrows.
"""

from __future__ import annotations

import numpy as np

from . import Built, Entry, export_torch


def build_whisper(size: str, batch: int) -> Built:
    import torch
    import transformers as tf

    full = size == "full"
    cfg = tf.WhisperConfig(num_mel_bins=80 if full else 16, d_model=384 if full else 64, encoder_layers=4 if full else 2,
                           encoder_attention_heads=6 if full else 4, encoder_ffn_dim=1536 if full else 128,
                           decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=64,
                           max_source_positions=1500 if full else 100, dropout=0.0, attention_dropout=0.0,
                           vocab_size=100, max_target_positions=32, pad_token_id=0, bos_token_id=0,
                           eos_token_id=0, decoder_start_token_id=0)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    encoder = tf.WhisperModel(cfg).get_encoder().eval()
    frames = 2 * cfg.max_source_positions
    feats = np.random.default_rng(0).standard_normal((batch, cfg.num_mel_bins, frames)).astype(np.float32)
    return export_torch(encoder, {"input_features": feats}, outputs=1)


def build_wav2vec2(size: str, batch: int) -> Built:
    import torch
    import transformers as tf

    full = size == "full"
    cfg = tf.Wav2Vec2Config(hidden_size=384 if full else 64, num_hidden_layers=4 if full else 2,
                            num_attention_heads=6 if full else 4, intermediate_size=1536 if full else 128,
                            conv_dim=(512,) * 7 if full else (64,) * 7, num_conv_pos_embeddings=128 if full else 16,
                            num_conv_pos_embedding_groups=16 if full else 4, hidden_dropout=0.0, attention_dropout=0.0,
                            activation_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0, do_stable_layer_norm=False,
                            apply_spec_augment=False)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = tf.Wav2Vec2Model(cfg).eval()
    samples = 16000 if full else 4000
    audio = np.random.default_rng(0).standard_normal((batch, samples)).astype(np.float32) * 0.1
    return export_torch(model, {"input_values": audio}, outputs=1)


def build_conv_lstm(size: str, batch: int) -> Built:
    import torch
    from torch import nn

    full = size == "full"
    freq, frames, ch, hid = (161, 400, 384, 256) if full else (40, 64, 48, 32)

    class ConvLSTM(nn.Module):  # DeepSpeech2-like: strided Conv1d front end, BiLSTM, per-frame characters
        def __init__(self) -> None:
            super().__init__()
            self.front = nn.Sequential(nn.Conv1d(freq, ch, 11, 2, 5), nn.BatchNorm1d(ch), nn.Hardtanh(0, 20),
                                       nn.Conv1d(ch, ch, 11, 1, 5), nn.BatchNorm1d(ch), nn.Hardtanh(0, 20))
            self.rnn = nn.LSTM(ch, hid, num_layers=2, bidirectional=True, batch_first=True)
            self.fc = nn.Linear(2 * hid, 29)

        def forward(self, spec):
            x = self.front(spec).transpose(1, 2)
            return self.fc(self.rnn(x)[0]).log_softmax(-1)

    torch.manual_seed(0)
    spec = np.random.default_rng(0).standard_normal((batch, freq, frames)).astype(np.float32)
    return export_torch(ConvLSTM().eval(), {"spec": spec})


ENTRIES = [
    Entry("whisper-encoder", "speech", "Whisper encoder (tiny widths), 80x3000 log-mel", build_whisper),
    Entry("wav2vec2", "speech", "wav2vec2: 7 Conv1d of 512 ch over 1 s of 16 kHz audio + transformer", build_wav2vec2),
    Entry("conv-bilstm-asr", "speech", "DeepSpeech2-style Conv1d + 2-layer BiLSTM, 400 frames", build_conv_lstm),
    Entry("conv-bilstm-asr-b8", "speech", "Conv1d + BiLSTM ASR, batch 8", build_conv_lstm, batch=8),
]
