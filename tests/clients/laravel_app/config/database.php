<?php
// The starter app's SQLite connection (examples/laravel); the test names
// the database file (DB_DATABASE).

return require __DIR__ . '/../../../../examples/laravel/config/database.php';
