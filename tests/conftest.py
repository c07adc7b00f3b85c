"""Fake 8 CPU devices before any JAX computation (the real execution path runs on them)."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
# what the `codesign` command sets for its process (importing codesign sets nothing)
jax.config.update("jax_enable_x64", True)
