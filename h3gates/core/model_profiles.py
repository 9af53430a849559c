"""H3Config: every shape of the MiniMax-H3 stand-in (h3-model.md), and the named profiles. No torch
import at module level: config validation reads the profiles before any job runs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

TAGS = {"video": 0, "text": 1, "audio": 2}


@dataclass(frozen=True)
class Segment:
    name: str  # text | audio | video
    rows: int

    @property
    def tag(self) -> int:
        return TAGS[self.name]


@dataclass(frozen=True)
class H3Config:
    name: str
    blocks: int
    hidden: int
    heads: int
    head_dim: int
    ffn: int
    segments: tuple[Segment, ...]  # packed [text | audio | video]
    video_grid: tuple[int, int, int]  # (t, h, w) for the video rows' RoPE positions
    timesteps: int = 12
    eps: float = 1e-5
    dtype: str = "bfloat16"
    rope_dims: int = 96  # rotate-half on channels 0..95: 3 axes x 16 frequencies, duplicated
    rope_theta: float = 1e4
    video_channels: int = 128
    audio_channels: int = 64
    text_channels: int = 256
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.heads * self.head_dim <= 0 or self.head_dim < self.rope_dims:
            raise ValueError(f"{self.name}: head_dim {self.head_dim} must hold the {self.rope_dims} RoPE channels")
        names = [s.name for s in self.segments]
        if names != ["text", "audio", "video"]:
            raise ValueError(f"{self.name}: segments must be packed text, audio, video; got {names}")
        t, h, w = self.video_grid
        if t * h * w != self.segments[2].rows:
            raise ValueError(
                f"{self.name}: video grid {self.video_grid} has {t * h * w} positions for {self.segments[2].rows} video rows"
            )

    @property
    def attn(self) -> int:
        return self.heads * self.head_dim

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.segments)

    def segment_bounds(self) -> list[tuple[Segment, int, int]]:
        out, r = [], 0
        for s in self.segments:
            out.append((s, r, r + s.rows))
            r += s.rows
        return out

    def gemm_shapes(self) -> dict[str, tuple[int, int]]:
        """(N, K) of the four quantized projections."""
        return {
            "qkv": (3 * self.attn, self.hidden),
            "out": (self.hidden, self.attn),
            "fc1": (2 * self.ffn, self.hidden),
            "fc2": (self.hidden, self.ffn),
        }

    def to_dict(self) -> dict:
        d = asdict(self)
        d["segments"] = [{"name": s.name, "rows": s.rows} for s in self.segments]
        d["rows"] = self.rows
        d["gemm_shapes"] = {k: list(v) for k, v in self.gemm_shapes().items()}
        return d


PROFILES = {
    "canonical": dict(
        blocks=50,
        hidden=5376,
        heads=56,
        head_dim=128,
        ffn=14336,
        segments=(("text", 100), ("audio", 414), ("video", 37296)),
        video_grid=(21, 37, 48),
    ),
    # H3-shaped with every ratio kept; 250 rows in three segments (not a multiple of 16)
    "tiny": dict(
        blocks=50,
        hidden=192,
        heads=2,
        head_dim=128,
        ffn=512,
        segments=(("text", 7), ("audio", 19), ("video", 224)),
        video_grid=(4, 7, 8),
        video_channels=16,
        audio_channels=8,
        text_channels=32,
    ),
}


def from_dict(name: str, d: dict) -> H3Config:
    d = dict(d)
    d["segments"] = tuple(
        Segment(s[0], int(s[1])) if isinstance(s, (list, tuple)) else Segment(s["name"], int(s["rows"]))
        for s in d["segments"]
    )
    d["video_grid"] = tuple(d["video_grid"])
    return H3Config(name=name, **d)


def load_profile(name: str, user_profiles: dict | None = None) -> H3Config:
    """A named profile: `canonical`, `tiny`, or one defined in config (`profiles:` mapping)."""
    if user_profiles and name in user_profiles:
        return from_dict(name, user_profiles[name])
    if name not in PROFILES:
        raise KeyError(f"unknown profile {name!r}; known: {sorted(PROFILES) + sorted(user_profiles or {})}")
    return from_dict(name, PROFILES[name])
