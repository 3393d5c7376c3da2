"""The loop: observe -> plan -> admit -> execute -> record, with adapters passed in."""
