// membership placeholder
