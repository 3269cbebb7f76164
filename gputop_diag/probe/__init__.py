"""The probe: measures a training or inference job from inside its own process."""
