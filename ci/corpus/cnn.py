"""Convolutional image classifiers written in torch (torchvision is not used): 12 architectures covering
efficient / mobile (v2, v3) / residual (basic and bottleneck) / dense / grouped (RegNetY, ResNeXt + SE) /
ConvNeXt large depthwise kernels with LayerNorm / NAS cells (DARTS-style separable and dilated convs,
pooling branches) / channel shuffle / Inception branches with ceil-mode pooling, and SiLU / HardSwish /
HardSigmoid activations.

Full size: 224 px with the published widths and depths (ImageNet's 1,000 classes).  CI size: 64 px,
channels divided by 4 (at least 8) and one block per stage.
"""

from __future__ import annotations

from . import Built, Entry, export_torch, image


def _modules(full: bool):  # noqa: C901 - one builder per architecture, kept together
    import torch
    from torch import nn
    from torch.nn import functional as F

    def w(c: int) -> int:
        return c if full else max(8, c // 4)

    def n(k: int) -> int:
        return k if full else 1

    def cba(cin, cout, k=3, s=1, g=1, act=nn.ReLU, d=1):
        return nn.Sequential(nn.Conv2d(cin, cout, k, s, d * (k // 2), dilation=d, groups=g, bias=False),
                             nn.BatchNorm2d(cout), act() if act else nn.Identity())

    class SE(nn.Module):
        def __init__(self, c, r=4, gate=nn.Sigmoid, act=nn.ReLU):
            super().__init__()
            h = max(8, c // r)
            self.f = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, h, 1), act(), nn.Conv2d(h, c, 1), gate())

        def forward(self, x):
            return x * self.f(x)

    class Classifier(nn.Module):
        def __init__(self, body, c):
            super().__init__()
            self.body, self.fc = body, nn.Linear(c, 1000)

        def forward(self, x):
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.body(x), 1), 1))

    # residual
    class Basic(nn.Module):
        def __init__(self, cin, cout, s):
            super().__init__()
            self.a, self.b = cba(cin, cout, 3, s), cba(cout, cout, 3, 1, act=None)
            self.skip = cba(cin, cout, 1, s, act=None) if s != 1 or cin != cout else nn.Identity()

        def forward(self, x):
            return torch.relu(self.b(self.a(x)) + self.skip(x))

    class Bottleneck(nn.Module):
        def __init__(self, cin, mid, cout, s, g=1, se=False):
            super().__init__()
            self.body = nn.Sequential(cba(cin, mid, 1), cba(mid, mid, 3, s, g), cba(mid, cout, 1, act=None),
                                      SE(cout, 16) if se else nn.Identity())
            self.skip = cba(cin, cout, 1, s, act=None) if s != 1 or cin != cout else nn.Identity()

        def forward(self, x):
            return torch.relu(self.body(x) + self.skip(x))

    def stem(c):
        return nn.Sequential(cba(3, c, 7, 2), nn.MaxPool2d(3, 2, 1))

    def resnet18():
        layers, c = [stem(w(64))], w(64)
        for cout, s in ((64, 1), (128, 2), (256, 2), (512, 2)):
            for i in range(n(2)):
                layers.append(Basic(c, w(cout), s if i == 0 else 1))
                c = w(cout)
        return Classifier(nn.Sequential(*layers), c)

    def bottleneck_net(widths, reps, g=1, se=False, mid_mult=0.25):
        layers, c = [stem(w(64))], w(64)
        for (cout, s), r in zip(widths, reps):
            for i in range(n(r)):
                mid = max(g, int(w(cout) * mid_mult) // g * g)
                layers.append(Bottleneck(c, mid, w(cout), s if i == 0 else 1, g, se))
                c = w(cout)
        return Classifier(nn.Sequential(*layers), c)

    def resnet50():
        return bottleneck_net(((256, 1), (512, 2), (1024, 2), (2048, 2)), (3, 4, 6, 3))

    def se_resnext():  # ResNeXt-50 32x4d widths, halved depth, squeeze-excitation after each block
        return bottleneck_net(((256, 1), (512, 2), (1024, 2), (2048, 2)), (2, 2, 2, 2), g=32 if full else 8,
                              se=True, mid_mult=0.5)

    # mobile
    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, k, s, t, act=nn.ReLU6, se=None):
            super().__init__()
            h = cin * t
            layers = [cba(cin, h, 1, act=act)] if t != 1 else []
            layers += [cba(h, h, k, s, h, act=act)]
            if se:
                layers.append(se(h))
            layers.append(cba(h, cout, 1, act=None))
            self.body, self.res = nn.Sequential(*layers), s == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.res else self.body(x)

    def mobilenet_v2():
        layers, c = [cba(3, w(32), 3, 2, act=nn.ReLU6)], w(32)
        for t, cout, r, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                              (6, 160, 3, 2), (6, 320, 1, 1)):
            for i in range(n(r)):
                layers.append(InvertedResidual(c, w(cout), 3, s if i == 0 else 1, t))
                c = w(cout)
        layers.append(cba(c, w(1280), 1, act=nn.ReLU6))
        return Classifier(nn.Sequential(*layers), w(1280))

    def mobilenet_v3():  # v3-large: HardSwish, SE with HardSigmoid gates, 5x5 depthwise
        def se(c):
            return SE(c, 4, gate=nn.Hardsigmoid)
        spec = ((3, 1, 16, False, "RE", 1), (3, 4, 24, False, "RE", 2), (3, 3, 24, False, "RE", 1),
                (5, 3, 40, True, "RE", 2), (5, 3, 40, True, "RE", 1), (3, 6, 80, False, "HS", 2),
                (3, 2.5, 80, False, "HS", 1), (3, 4.6, 112, True, "HS", 1), (5, 6, 160, True, "HS", 2),
                (5, 6, 160, True, "HS", 1))
        layers, c = [cba(3, w(16), 3, 2, act=nn.Hardswish)], w(16)
        for k, t, cout, use_se, a, s in spec if full else spec[::2]:
            act = nn.ReLU if a == "RE" else nn.Hardswish
            h = int(c * t) // 1
            blk = InvertedResidual(c, w(cout), k, s, 1, act, se if use_se else None)
            if t != 1:  # expansion to a non-integer multiple, as v3 has
                blk.body = nn.Sequential(cba(c, h, 1, act=act), cba(h, h, k, s, h, act=act),
                                         *( [se(h)] if use_se else []), cba(h, w(cout), 1, act=None))
            layers.append(blk)
            c = w(cout)
        layers += [cba(c, w(960), 1, act=nn.Hardswish)]
        body = nn.Sequential(*layers)

        class V3(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = body
                self.head = nn.Sequential(nn.Linear(w(960), w(1280)), nn.Hardswish(), nn.Linear(w(1280), 1000))

            def forward(self, x):
                return self.head(self.body(x).mean((2, 3)))
        return V3()

    def efficientnet_b0():  # MBConv with SiLU and SE (SiLU inside, Sigmoid gate)
        def se(c):
            return SE(c, 24, act=nn.SiLU)
        layers, c = [cba(3, w(32), 3, 2, act=nn.SiLU)], w(32)
        for t, k, cout, r, s in ((1, 3, 16, 1, 1), (6, 3, 24, 2, 2), (6, 5, 40, 2, 2), (6, 3, 80, 3, 2),
                                 (6, 5, 112, 3, 1), (6, 5, 192, 4, 2), (6, 3, 320, 1, 1)):
            for i in range(n(r)):
                layers.append(InvertedResidual(c, w(cout), k, s if i == 0 else 1, t, nn.SiLU, se))
                c = w(cout)
        layers.append(cba(c, w(1280), 1, act=nn.SiLU))
        return Classifier(nn.Sequential(*layers), w(1280))

    def regnety_400mf():  # RegNetY-400MF: group width 8, SE, widths 48-104-208-440
        layers, c = [cba(3, w(32), 3, 2)], w(32)
        gw = 8 if full else 4
        for cout, r in ((48, 1), (104, 3), (208, 6), (440, 6)):
            for i in range(n(r)):
                cw = w(cout) // gw * gw
                layers.append(Bottleneck(c, cw, cw, 2 if i == 0 else 1, cw // gw, se=True))
                c = cw
        return Classifier(nn.Sequential(*layers), c)

    class Dense(nn.Module):
        def __init__(self, cin, growth):
            super().__init__()
            self.f = nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, 4 * growth, 1, bias=False),
                                   nn.BatchNorm2d(4 * growth), nn.ReLU(), nn.Conv2d(4 * growth, growth, 3, 1, 1, bias=False))

        def forward(self, x):
            return torch.cat([x, self.f(x)], 1)

    def densenet():  # DenseNet-121's growth 32 and transitions, blocks 6-12-24-16 halved
        g = w(32)
        layers, c = [stem(w(64))], w(64)
        for bi, r in enumerate((3, 6, 12, 8)):
            for _ in range(n(r)):
                layers.append(Dense(c, g))
                c += g
            if bi < 3:
                layers += [nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2, 2)]
                c //= 2
        layers += [nn.BatchNorm2d(c), nn.ReLU()]
        return Classifier(nn.Sequential(*layers), c)

    class LayerNorm2d(nn.LayerNorm):
        def forward(self, x):
            return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    class ConvNeXtBlock(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.dw = nn.Conv2d(c, c, 7, 1, 3, groups=c)
            self.norm = nn.LayerNorm(c, eps=1e-6)
            self.pw1, self.pw2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
            self.gamma = nn.Parameter(torch.full((c,), 0.1))

        def forward(self, x):
            y = self.norm(self.dw(x).permute(0, 2, 3, 1))
            y = self.pw2(F.gelu(self.pw1(y))) * self.gamma
            return x + y.permute(0, 3, 1, 2)

    def convnext():  # ConvNeXt-Nano-like: patchify stem, 7x7 depthwise, channels-last LayerNorm + MLP
        dims, reps = (80, 160, 320, 640), (2, 2, 8, 2)
        layers = [nn.Conv2d(3, w(dims[0]), 4, 4), LayerNorm2d(w(dims[0]), eps=1e-6)]
        for i, (d, r) in enumerate(zip(dims, reps)):
            if i:
                layers += [LayerNorm2d(w(dims[i - 1]), eps=1e-6), nn.Conv2d(w(dims[i - 1]), w(d), 2, 2)]
            layers += [ConvNeXtBlock(w(d)) for _ in range(n(r))]
        return Classifier(nn.Sequential(*layers), w(dims[-1]))

    class SepConv(nn.Module):
        def __init__(self, c, k, d=1):
            super().__init__()
            self.f = nn.Sequential(nn.ReLU(), nn.Conv2d(c, c, k, 1, d * (k // 2), dilation=d, groups=c, bias=False),
                                   nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c))

        def forward(self, x):
            return self.f(x)

    class DartsCell(nn.Module):  # four nodes, each the sum of two ops on earlier states, outputs concatenated
        def __init__(self, c):
            super().__init__()
            self.ops = nn.ModuleList([SepConv(c, 3), SepConv(c, 5), SepConv(c, 3, 2), nn.MaxPool2d(3, 1, 1),
                                      nn.AvgPool2d(3, 1, 1, count_include_pad=False), SepConv(c, 5, 2),
                                      nn.Identity(), SepConv(c, 3)])
            self.pre = cba(2 * c, c, 1)
            self.post = cba(4 * c, 2 * c, 1)

        def forward(self, x):
            s0 = self.pre(x)
            s1 = self.ops[0](s0) + self.ops[1](s0)
            s2 = self.ops[2](s0) + self.ops[3](s1)
            s3 = self.ops[4](s1) + self.ops[5](s2)
            s4 = self.ops[6](s2) + self.ops[7](s3)
            return self.post(torch.cat([s1, s2, s3, s4], 1))

    def nas_cells():
        c = w(48)
        layers = [cba(3, 2 * c, 3, 2), cba(2 * c, 2 * c, 3, 2)]
        for stage in range(3):
            layers += [DartsCell(c) for _ in range(n(3))]
            if stage < 2:
                layers += [cba(2 * c, 4 * c, 3, 2)]
                c *= 2
        return Classifier(nn.Sequential(*layers), 2 * c)

    class ShuffleUnit(nn.Module):
        def __init__(self, cin, cout, s):
            super().__init__()
            h = cout // 2
            self.s = s
            self.branch = nn.Sequential(cba(cin if s == 2 else h, h, 1), cba(h, h, 3, s, h, act=None), cba(h, h, 1))
            self.proj = nn.Sequential(cba(cin, cin, 3, 2, cin, act=None), cba(cin, h, 1)) if s == 2 else None

        def forward(self, x):
            if self.s == 1:
                a, b = x.chunk(2, 1)
                y = torch.cat([a, self.branch(b)], 1)
            else:
                y = torch.cat([self.proj(x), self.branch(x)], 1)
            bn, c, hh, ww = y.shape
            return y.view(bn, 2, c // 2, hh, ww).transpose(1, 2).reshape(bn, c, hh, ww)

    def shufflenet_v2():
        layers, c = [cba(3, w(24), 3, 2), nn.MaxPool2d(3, 2, 1)], w(24)
        for cout, r in ((116, 4), (232, 8), (464, 4)):
            co = w(cout) // 2 * 2
            for i in range(n(r)):
                layers.append(ShuffleUnit(c, co, 2 if i == 0 else 1))
                c = co
        layers.append(cba(c, w(1024), 1))
        return Classifier(nn.Sequential(*layers), w(1024))

    class Inception(nn.Module):
        def __init__(self, cin, c1, c3r, c3, c5r, c5, cp):
            super().__init__()
            self.b1 = cba(cin, c1, 1)
            self.b2 = nn.Sequential(cba(cin, c3r, 1), cba(c3r, c3, 3))
            self.b3 = nn.Sequential(cba(cin, c5r, 1), cba(c5r, c5, 3), cba(c5, c5, 3))
            self.b4 = nn.Sequential(nn.AvgPool2d(3, 1, 1, ceil_mode=True, count_include_pad=False), cba(cin, cp, 1))

        def forward(self, x):
            return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)

    def inception():  # GoogLeNet / Inception-v2 style with ceil-mode pooling between stages
        layers = [cba(3, w(64), 7, 2), nn.MaxPool2d(3, 2, ceil_mode=True), cba(w(64), w(192), 3),
                  nn.MaxPool2d(3, 2, ceil_mode=True)]
        c = w(192)
        for stage in ((64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64), None,
                      (192, 96, 208, 16, 48, 64), (160, 112, 224, 24, 64, 64), None, (256, 160, 320, 32, 128, 128)):
            if stage is None:
                layers.append(nn.MaxPool2d(3, 2, ceil_mode=True))
                continue
            ws = [w(v) for v in stage]
            layers.append(Inception(c, *ws))
            c = ws[0] + ws[2] + ws[4] + ws[5]
        body = nn.Sequential(*layers)

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body, self.fc = body, nn.Linear(c, 1000)

            def forward(self, x):  # a fixed 7x7 average pool as GoogLeNet has (larger than the map at 64 px)
                y = self.body(x)
                y = F.avg_pool2d(y, 7, 1, ceil_mode=True) if full else F.avg_pool2d(y, 4, 4, ceil_mode=True)
                return self.fc(torch.flatten(y, 1))
        return Net()

    return {"resnet18": resnet18, "resnet50": resnet50, "se-resnext": se_resnext, "mobilenet-v2": mobilenet_v2,
            "mobilenet-v3": mobilenet_v3, "efficientnet-b0": efficientnet_b0, "regnety-400mf": regnety_400mf,
            "densenet": densenet, "convnext": convnext, "nas-darts": nas_cells, "shufflenet-v2": shufflenet_v2,
            "inception": inception}


def build_cnn(size: str, batch: int, arch: str) -> Built:
    import torch

    full = size == "full"
    torch.manual_seed(0)
    model = _modules(full)[arch]().eval()
    with torch.no_grad():  # BatchNorm statistics that are not the identity, as trained models have
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return export_torch(model, {"image": image(batch, 3, 224 if full else 64)})


_KINDS = {
    "resnet18": "ResNet-18 (basic blocks)", "resnet50": "ResNet-50 (bottlenecks)",
    "se-resnext": "SE-ResNeXt 32x4d (grouped 3x3 + squeeze-excitation)",
    "mobilenet-v2": "MobileNetV2 (inverted residuals, ReLU6)",
    "mobilenet-v3": "MobileNetV3-large (HardSwish, SE with HardSigmoid, 5x5 dw)",
    "efficientnet-b0": "EfficientNet-B0 (MBConv, SiLU, SE)", "regnety-400mf": "RegNetY-400MF (group width 8, SE)",
    "densenet": "DenseNet (growth 32, concat blocks)", "convnext": "ConvNeXt-nano-like (7x7 dw, LayerNorm, GELU MLP)",
    "nas-darts": "DARTS-style NAS cells (sep/dilated convs, pool branches)",
    "shufflenet-v2": "ShuffleNetV2 (split, channel shuffle)",
    "inception": "Inception/GoogLeNet (branches, ceil-mode pools, 7x7 avg pool)",
}

ENTRIES = [Entry(name, "cnn", kind + ", 224 px", build_cnn, params=(("arch", name),)) for name, kind in _KINDS.items()]
ENTRIES.append(Entry("resnet50-b8", "cnn", "ResNet-50, batch 8", build_cnn, batch=8, params=(("arch", "resnet50"),)))
