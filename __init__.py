"""ComfyUI entry point of the WanCore node pack.

ComfyUI imports this file by path; importing it without ComfyUI installed must not fail (the core package
``wan_core`` never imports ComfyUI, and the node layer only registers when ComfyUI is present).
"""
WEB_DIRECTORY = "./web"

NODE_CLASS_MAPPINGS: dict = {}
NODE_DISPLAY_NAME_MAPPINGS: dict = {}

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY"]
