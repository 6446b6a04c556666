# The server this folder's manifest should have named (srv.py is not here).
