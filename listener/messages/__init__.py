"""What a message is.

The codec, the stored-payload format, packing, envelopes, poison records and the publisher.
"""
