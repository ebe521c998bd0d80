"""Official sampling settings of the Wan 2.2 models (docs/wan22.md section 1), without importing torch (the command
line reads them before it loads anything)."""
from __future__ import annotations

NUM_TRAIN_TIMESTEPS = 1000  # Wan2.2 wan/configs/shared_config.py line 17
# T2V-A14B: wan/configs/wan_t2v_A14B.py lines 34-37 (shift 12, 40 steps, boundary 0.875, guidance (low, high) =
# (3.0, 4.0)); I2V-A14B: wan/configs/wan_i2v_A14B.py lines 34-37 (shift 5, 40 steps, boundary 0.900, 3.5 / 3.5)
T2V_A14B = {"boundary": 0.875, "guidance_high": 4.0, "guidance_low": 3.0, "shift": 12.0, "steps": 40, "fps": 16}
I2V_A14B = {"boundary": 0.900, "guidance_high": 3.5, "guidance_low": 3.5, "shift": 5.0, "steps": 40, "fps": 16}
# TI2V-5B: wan/configs/wan_ti2v_5B.py lines 32-36 (24 fps, shift 5, 50 steps, guidance 5, 121 frames); sizes
# 1280*704 or 704*1280 (wan/configs/__init__.py line 46, SUPPORTED_SIZES)
TI2V_5B = {"guidance": 5.0, "shift": 5.0, "steps": 50, "fps": 24, "frames": 121, "width": 1280, "height": 704}
