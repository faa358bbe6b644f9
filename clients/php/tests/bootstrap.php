<?php

declare(strict_types=1);

// The tests use the Composer-less autoloader, so they run from a plain checkout.
require __DIR__ . '/../autoload.php';
require __DIR__ . '/DelayqTestCase.php';
