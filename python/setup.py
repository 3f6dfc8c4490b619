"""Installs the meshtrain Python client: `pip install ./python` (works offline: setuptools only,
no build isolation needed because there is no pyproject.toml build-system table)."""
from setuptools import setup

setup(
    name="meshtrain",
    version="0.1.0",
    description="Attach a training process (PyTorch, numpy, ...) to a meshtrain agent",
    long_description=open(__file__.replace("setup.py", "README.md")).read(),
    long_description_content_type="text/markdown",
    packages=["meshtrain"],
    python_requires=">=3.8",
    install_requires=["numpy"],
    extras_require={"torch": ["torch"]},
)
