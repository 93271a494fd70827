"""GR00T generations the loop fine-tunes and serves, and what each accepts (standard library only).

One :class:`GrootRelease` per selectable generation (form field ``groot_version``, pipeline parameter
``GrootVersion``, fine-tune hyperparameter ``groot_version``, policy server ``--modality-config-format``):

* ``n1.5`` — NVIDIA/Isaac-GR00T ``n1.5-release``, ``nvidia/GR00T-N1.5-3B``; ``gr00t/data/embodiment_tags.py``:
  ``gr1``, ``oxe_droid``, ``agibot_genie1``, ``new_embodiment``.
* ``n1.6`` — Isaac-GR00T N1.6 (``gr00t/data/embodiment_tags.py``): pretrain ``robocasa_panda_omron``, ``gr1``,
  ``behavior_r1_pro``; pre-registered post-train ``unitree_g1``, ``libero_panda``, ``oxe_google``,
  ``oxe_widowx``, ``oxe_droid`` (added in a later N1.6 commit); ``new_embodiment``.
* ``n1.7`` — Isaac-GR00T tag ``n1.7-release``, ``nvidia/GR00T-N1.7-3B`` on the gated backbone
  ``nvidia/Cosmos-Reason2-2B`` (a Hugging Face token is needed to fine-tune and to load it). Its tags (the
  ``embodiment_id.json`` of the base checkpoint): pretrain ``oxe_droid_relative_eef_relative_joint``, ``xdof``,
  ``xdof_subtask``, ``real_g1``, ``real_r1_pro_sharpa`` (+ ``_human``, ``_maxinsights``, ``_mecka``); post-train
  ``unitree_g1``, ``unitree_g1_sonic``, ``simpler_env_google``, ``simpler_env_widowx``, ``libero_panda``;
  ``new_embodiment``. ``gr1`` and the other N1.6 tags are gone.

The ZMQ policy protocol (``gr00t/policy/server_client.py``) is the same in N1.6 and N1.7: ``wire_format`` is
the ``get_modality_config`` encoding a client of that generation decodes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GrootRelease:
    """One GR00T generation: where it comes from and what it accepts."""

    version: str  #: ``n1.5`` / ``n1.6`` / ``n1.7``
    base_model: str  #: the Hugging Face model id of the base checkpoint
    embodiment_tags: frozenset[str]  #: ``EmbodimentTag`` values the model knows (lower case)
    needs_hf_token: bool  #: a gated download (backbone or processor) at fine-tune and load time
    wire_format: str  #: ``get_modality_config`` encoding its clients decode (``n1.5`` or ``n1.6``)
    backbone: str = ""  #: the vision-language backbone's model id, when it is a separate (gated) download


RELEASES: dict[str, GrootRelease] = {r.version: r for r in (
    GrootRelease("n1.5", "nvidia/GR00T-N1.5-3B",
                 frozenset({"gr1", "oxe_droid", "agibot_genie1", "new_embodiment"}),
                 needs_hf_token=False, wire_format="n1.5"),
    GrootRelease("n1.6", "nvidia/GR00T-N1.6-3B",
                 frozenset({"robocasa_panda_omron", "gr1", "behavior_r1_pro", "unitree_g1", "libero_panda",
                            "oxe_google", "oxe_widowx", "oxe_droid", "new_embodiment"}),
                 needs_hf_token=False, wire_format="n1.6"),
    GrootRelease("n1.7", "nvidia/GR00T-N1.7-3B",
                 frozenset({"oxe_droid_relative_eef_relative_joint", "xdof", "xdof_subtask", "real_g1",
                            "real_r1_pro_sharpa", "real_r1_pro_sharpa_human", "real_r1_pro_sharpa_maxinsights",
                            "real_r1_pro_sharpa_mecka", "unitree_g1", "unitree_g1_sonic", "simpler_env_google",
                            "simpler_env_widowx", "libero_panda", "new_embodiment"}),
                 needs_hf_token=True, wire_format="n1.6", backbone="nvidia/Cosmos-Reason2-2B"),
)}
#: The generation the images are built for when nothing is chosen (the pinned Isaac-GR00T commit).
DEFAULT_VERSION = "n1.6"
VERSIONS = tuple(RELEASES)


def base_model_prefix(version: str) -> str:
    """The S3 key prefix (in the artifacts bucket) of ``version``'s base checkpoint, which the fine-tune's model
    channel copies to ``--base-model-path``: ``models/groot-base/`` for the default generation (the layout before
    versions were selectable), ``models/groot-base/<version>/`` for the others."""
    return "models/groot-base/" + ("" if version == DEFAULT_VERSION else f"{version}/")


def release(version: str) -> GrootRelease:
    """The release named ``version`` (``n1.5`` / ``n1.6`` / ``n1.7``).

    :raises ValueError: an unknown version, naming the known ones.
    """
    try:
        return RELEASES[version]
    except KeyError:
        raise ValueError(f"unknown GR00T version {version!r}: one of {list(VERSIONS)}") from None


def embodiment_problem(version: str, tag: str) -> str | None:
    """Why ``tag`` cannot be used with ``version`` (``None`` when it can).

    Tags compare case-insensitively (GR00T's scripts accept the enum name or its value).
    """
    rel = release(version)
    if tag.lower() in rel.embodiment_tags:
        return None
    return (f"embodiment_tag {tag!r} is not a GR00T {version.upper()} embodiment ({rel.base_model}): use one of "
            f"{sorted(rel.embodiment_tags)} (new_embodiment for a robot of your own)")
