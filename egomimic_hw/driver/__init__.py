"""Arm driver: the controller contract (base), the simulated SDK (sim), the ARX SDK (arx5).

`backends.open_controller(backend, ...)` selects by the launch argument value; SDK imports are lazy.
"""
