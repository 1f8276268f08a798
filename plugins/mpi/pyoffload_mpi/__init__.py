"""pyoffload-mpi: every device of every MPI rank as a device of rank 0.

``mpirun -n N python -m pyoffload_mpi app.py [args]`` runs ``app.py`` on rank 0 while ranks
1..N-1 serve their devices; see ``plugin`` (rank 0's hooks), ``server`` and ``docs/backends/mpi.md``.
Importing this package does not initialise MPI.
"""
