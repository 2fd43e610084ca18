"""Detection, segmentation and OCR heads (torch, written here; SegFormer from a ``transformers`` config):
feature pyramids with nearest / bilinear Resize and ConvTranspose upsampling.

Full size: a YOLOv8-style detector at 416 px, a U-Net at 256 px (ConvTranspose decoder), SegFormer-B0 at
256 px (bilinear Resize of four scales), a DBNet text detector at 480 px (nearest Resize FPN, ConvTranspose
probability head).  CI size: 64 px, narrower.
"""

from __future__ import annotations

from . import Built, Entry, export_torch, image


def _net(arch: str, full: bool):
    import torch
    from torch import nn
    from torch.nn import functional as F

    def w(c: int) -> int:
        return c if full else max(8, c // 4)

    def cbs(cin, cout, k=3, s=1, act=nn.SiLU):
        return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), act())

    if arch == "yolo":
        class C2f(nn.Module):
            def __init__(self, cin, cout):
                super().__init__()
                h = cout // 2
                self.cv1, self.cv2 = cbs(cin, 2 * h, 1), cbs(3 * h, cout, 1)
                self.m = nn.Sequential(cbs(h, h), cbs(h, h))

            def forward(self, x):
                a, b = self.cv1(x).chunk(2, 1)
                return self.cv2(torch.cat([a, b, b + self.m(b)], 1))

        class Yolo(nn.Module):
            def __init__(self):
                super().__init__()
                self.p3 = nn.Sequential(cbs(3, w(32), 3, 2), cbs(w(32), w(64), 3, 2), C2f(w(64), w(64)),
                                        cbs(w(64), w(128), 3, 2), C2f(w(128), w(128)))
                self.p4 = nn.Sequential(cbs(w(128), w(256), 3, 2), C2f(w(256), w(256)))
                self.p5 = nn.Sequential(cbs(w(256), w(256), 3, 2), C2f(w(256), w(256)))
                self.n4 = C2f(w(512), w(256))
                self.n3 = C2f(w(384), w(128))
                self.heads = nn.ModuleList(nn.Sequential(cbs(c, c), nn.Conv2d(c, 84, 1)) for c in (w(128), w(256)))

            def forward(self, x):
                p3 = self.p3(x)
                p4 = self.p4(p3)
                p5 = self.p5(p4)
                t4 = self.n4(torch.cat([F.interpolate(p5, scale_factor=2.0, mode="nearest"), p4], 1))
                o3 = self.n3(torch.cat([F.interpolate(t4, scale_factor=2.0, mode="nearest"), p3], 1))
                return torch.cat([h(o).flatten(2) for h, o in zip(self.heads, (o3, t4))], 2).sigmoid()
        return Yolo(), 416 if full else 64

    if arch == "unet":
        def double(cin, cout):
            return nn.Sequential(cbs(cin, cout, act=nn.ReLU), cbs(cout, cout, act=nn.ReLU))

        class UNet(nn.Module):
            def __init__(self):
                super().__init__()
                ch = [w(32), w(64), w(128), w(256)]
                self.downs = nn.ModuleList([double(3, ch[0])] + [double(a, b) for a, b in zip(ch, ch[1:])])
                self.ups = nn.ModuleList(nn.ConvTranspose2d(b, a, 2, 2) for a, b in zip(ch, ch[1:]))
                self.decs = nn.ModuleList(double(2 * a, a) for a in ch[:-1])
                self.out = nn.Conv2d(ch[0], 21, 1)

            def forward(self, x):
                skips = []
                for i, d in enumerate(self.downs):
                    x = d(x if i == 0 else F.max_pool2d(x, 2))
                    skips.append(x)
                for i in reversed(range(len(self.ups))):
                    x = self.decs[i](torch.cat([self.ups[i](x), skips[i]], 1))
                return self.out(x)
        return UNet(), 256 if full else 64

    if arch == "dbnet":
        class Block(nn.Module):
            def __init__(self, cin, cout, s):
                super().__init__()
                self.f = nn.Sequential(cbs(cin, cout, 3, s, nn.ReLU), nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                                       nn.BatchNorm2d(cout))
                self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, s, bias=False), nn.BatchNorm2d(cout))

            def forward(self, x):
                return torch.relu(self.f(x) + self.skip(x))

        class DBNet(nn.Module):  # ResNet-ish backbone, FPN (nearest upsampling), DB probability head
            def __init__(self):
                super().__init__()
                ch = [w(64), w(128), w(256), w(512)]
                self.stem = nn.Sequential(cbs(3, w(32), 3, 2, nn.ReLU), cbs(w(32), ch[0], 3, 2, nn.ReLU))
                self.stages = nn.ModuleList([Block(ch[0], ch[0], 1)] + [Block(a, b, 2) for a, b in zip(ch, ch[1:])])
                inner = w(96)
                self.lat = nn.ModuleList(nn.Conv2d(c, inner, 1, bias=False) for c in ch)
                self.smooth = nn.ModuleList(nn.Conv2d(inner, inner // 4, 3, 1, 1, bias=False) for _ in ch)
                self.head = nn.Sequential(cbs(inner, inner // 4, 3, 1, nn.ReLU),
                                          nn.ConvTranspose2d(inner // 4, inner // 4, 2, 2), nn.BatchNorm2d(inner // 4),
                                          nn.ReLU(), nn.ConvTranspose2d(inner // 4, 1, 2, 2), nn.Sigmoid())

            def forward(self, x):
                feats, y = [], self.stem(x)
                for s in self.stages:
                    y = s(y)
                    feats.append(y)
                lat = [l(f) for l, f in zip(self.lat, feats)]
                for i in range(3, 0, -1):
                    lat[i - 1] = lat[i - 1] + F.interpolate(lat[i], scale_factor=2.0, mode="nearest")
                outs = [F.interpolate(s(l), scale_factor=2.0 ** i, mode="nearest") if i else s(l)
                        for i, (s, l) in enumerate(zip(self.smooth, lat))]
                return self.head(torch.cat(outs, 1))
        return DBNet(), 480 if full else 64

    if arch == "segformer":
        import transformers as tf

        cfg = tf.SegformerConfig(num_channels=3, num_encoder_blocks=4, depths=[2, 2, 2, 2] if full else [1, 1, 1, 1],
                                 sr_ratios=[8, 4, 2, 1], hidden_sizes=[32, 64, 160, 256] if full else [16, 32, 48, 64],
                                 num_attention_heads=[1, 2, 5, 8] if full else [1, 2, 2, 4],
                                 decoder_hidden_size=256 if full else 32, hidden_dropout_prob=0.0,
                                 attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0, drop_path_rate=0.0,
                                 num_labels=19)
        cfg._attn_implementation = "eager"
        return tf.SegformerForSemanticSegmentation(cfg), 256 if full else 64
    raise KeyError(arch)


def build_detection(size: str, batch: int, arch: str) -> Built:
    import torch

    torch.manual_seed(0)
    model, px = _net(arch, size == "full")
    model = model.eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    key = "pixel_values" if arch == "segformer" else "image"
    return export_torch(model, {key: image(batch, 3, px)}, outputs=1)


ENTRIES = [
    Entry("yolo-det", "detection", "YOLOv8-style detector (C2f, nearest Resize FPN), 416 px", build_detection,
          params=(("arch", "yolo"),)),
    Entry("unet-seg", "detection", "U-Net segmenter (ConvTranspose decoder), 256 px", build_detection,
          params=(("arch", "unet"),)),
    Entry("unet-seg-b8", "detection", "U-Net, batch 8", build_detection, batch=8, params=(("arch", "unet"),)),
    Entry("segformer", "detection", "SegFormer-B0 (bilinear Resize decoder), 256 px", build_detection,
          params=(("arch", "segformer"),)),
    Entry("dbnet-ocr", "detection", "DBNet text detector (FPN + ConvTranspose head), 480 px", build_detection,
          params=(("arch", "dbnet"),)),
]
