"""Pure renderers: config (+ host facts) -> the files gpustack applies. ``gpustack render`` and
``gpustack up`` call the same functions."""
