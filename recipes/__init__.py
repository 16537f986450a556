"""Entry points and their helpers: the loss demo now; training and evaluation entry points later."""
